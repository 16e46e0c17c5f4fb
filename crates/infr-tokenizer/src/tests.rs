//! Unit tests on hand-made vocabularies.
