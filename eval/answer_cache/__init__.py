"""The semantic answer cache: which earlier question a question may reuse the answer of (lookup) and the
guard that both ask the same thing.
"""
