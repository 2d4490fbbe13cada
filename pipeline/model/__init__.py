"""The model side: the tiny bigram model, checkpoints with the tokenizer guard, and training.

``bigram`` (the model and generation), ``checkpoint`` (safetensors checkpoints that load without executing
code and refuse a tokenizer with another fingerprint), ``resume`` (the resume policy: what to do with the
checkpoint a run finds), ``homes`` (local and remote checkpoint locations and the order they are replaced in),
``integrity`` (a checkpoint's checksums), ``optimizer_state`` (AdamW's state in a checkpoint), ``foreign``
(the guard for models trained elsewhere) and ``training`` (the loop, its metrics and the loss plot). The top
room: may import every other; torch lives here.
"""
