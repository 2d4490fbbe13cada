"""Web data: WARC reading, HTML to text, the URL filter, PII redaction and decontamination.

``warc`` (HTML response records of .warc/.warc.gz files, with fastwarc), ``extract`` (charset decoding
and main-text extraction, with resiliparse), ``urls`` (domain and URL-substring blocklists, an
allow-list), ``pii`` (e-mail and public IP addresses replaced by placeholders) and ``decontam``
(n-gram overlap with evaluation sets, hashed): libraries that know nothing of the prepare chain.
``readers`` and ``steps`` wrap them as prepare's ``warc`` and ``html`` readers and its ``html_extract``,
``url_filter``, ``pii`` and ``decontaminate`` steps (entries of :mod:`pipeline.data.registry`). fastwarc and
resiliparse are imported inside the functions that use them, so importing a module costs nothing.
"""
