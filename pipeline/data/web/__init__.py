"""Web data: WARC reading, HTML to text, the URL filter, PII redaction and decontamination.

``warc`` (HTML response records of .warc/.warc.gz files, with fastwarc), ``extract`` (charset decoding
and main-text extraction, with resiliparse), ``urls`` (domain and URL-substring blocklists, an
allow-list), ``pii`` (e-mail and public IP addresses replaced by placeholders) and ``decontam``
(n-gram overlap with evaluation sets, hashed). Each is a library of its own: it knows nothing of the
prepare chain, which wraps them as steps and readers. fastwarc and resiliparse are imported inside the
functions that use them, so importing a module costs nothing.
"""
