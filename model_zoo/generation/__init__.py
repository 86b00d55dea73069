"""The generation rows' graph builders (diffusion transformers, Stable Diffusion's UNet, the image and video VAEs) and
render_convert.py, which turns a diffusers pipeline directory into their graphs and the files lite.diffusion reads."""
