"""Components, child scripts and topology files of the multilang tests."""
