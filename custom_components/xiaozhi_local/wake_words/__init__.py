"""A device's wake word: the catalog of models, the files, the packs, a change and its URL."""
