"""A step of the project's own (docs/extending.md): drop one-line facts of too few words."""


def drop_short(document, *, min_words):
    """Keep a document of at least ``min_words`` words; drop the others by the rule ``too_few_words``."""
    if len(document.text.split()) < min_words:
        return False, "too_few_words"
    return True
