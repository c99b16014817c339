"""Training on the user's own corpus: a unit scorer (a cross-encoder, or the bi-encoder itself, fine-tuned from
the bundled MiniLM) from pairs labelled on an index by a question file's references (`cribsheet train-scorer`).
"""
