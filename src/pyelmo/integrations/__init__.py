"""pyelmo inside other libraries' pipelines (spaCy)."""
