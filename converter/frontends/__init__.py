"""Source-format frontends: each turns a model file into the converter IR."""
