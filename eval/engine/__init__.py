"""The generation engine: the vLLM generator, its precision on this machine, and the bundled model files."""
