"""T5 / UMT5 text encoders, the text towers of several generation rows (Wan's UMT5-XXL, FLUX's and SD3's T5-XXL):
no registry row of their own; their graph builder (model_zoo/t5_graph.py) serves those rows' `text_encoder` graphs
and any T5EncoderModel / UMT5EncoderModel checkpoint given to converter_lite --fmk=HF (the encoder stack only)."""
from model_zoo.t5_graph import build_t5_encoder_graph

GRAPH_BUILDERS = {"t5": build_t5_encoder_graph, "umt5": build_t5_encoder_graph}
