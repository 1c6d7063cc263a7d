"""The static rules for C++/CUDA candidate sources: scan.py runs them on tree-sitter's syntax tree (tree.py), with
what they know of each function (context.py) and the names they look for (vocab.py); each rules_*.py holds one family
(concurrency, files, library, precision, state). Imports nothing itself."""
