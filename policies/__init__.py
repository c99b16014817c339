"""The gate policies, installed as the package `cribsheet_policies` (pyproject's `package-dir`): `gate.yaml`
is the release policy a project file's `policy: default` names.
"""
