"""One module per model family: its registry entries (`ENTRIES`) and, where the checkpoint frontend converts it,
its graph builders (`GRAPH_BUILDERS`). model_zoo.registry collects every module here; adding a family is adding a
file."""
