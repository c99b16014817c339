"""Knowledge side of cribsheet: load, chunk, embed, index (LanceDB) and retrieve."""
