"""The model side: the tiny bigram model, checkpoints with the tokenizer guard, and training.

``bigram`` (the model and generation), ``checkpoint`` (safetensors checkpoints that load without executing
code and refuse a tokenizer with another fingerprint) and ``training`` (resume policy, checkpoint homes, the
loop and its metrics). The top room: may import every other; torch lives here.
"""
