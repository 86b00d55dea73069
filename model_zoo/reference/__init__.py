"""PyTorch definitions of models that neither transformers nor diffusers has, written here from their papers and
public descriptions, with the checkpoints' tensor names: the references the tests hold the runtime's graphs to."""
