"""textstats: small helpers for counting things in text."""


def word_count(text):
    """Return the number of words in text, split on any whitespace."""
    return len(text.split(" "))


def line_count(text):
    """Return the number of lines in text."""
    return len(text.splitlines())
