"""The native tokenizer core, built by ``pip install`` when a C++ compiler is at hand (metadata: pyproject.toml).

``optional=True``: without a compiler, or if the build fails, the install still succeeds and lmprep runs
on its pure-Python path (``lmprep --version`` says which; docs/native.md).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "pipeline.tokenizer._native",
            sources=["pipeline/tokenizer/_native.cpp"],
            depends=["pipeline/tokenizer/_unicode_tables.h", "pipeline/tokenizer/_native_split.h",
                     "pipeline/tokenizer/_native_bpe.h", "pipeline/tokenizer/_native_cache.h",
                     "pipeline/tokenizer/_native_train.h", "pipeline/tokenizer/_native_encode.h",
                     "pipeline/tokenizer/_native_threads.h", "pipeline/tokenizer/_native_fault.h",
                     "pipeline/tokenizer/_native_json.h"],
            language="c++",
            extra_compile_args=["-std=c++17"],
            optional=True,
        )
    ],
)
