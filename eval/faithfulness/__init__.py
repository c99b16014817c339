"""The faithfulness checker: claims split from an answer, aligned with the context, the question's slots, the
verdict per claim; and the optional LLM judge with the local vLLM server it can start.
"""
