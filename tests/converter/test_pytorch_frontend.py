"""--fmk=PYTORCH: a TorchScript archive (with --inputShape) and a torch.export archive (its dynamic batch dim kept)
convert through the ONNX path and compute what PyTorch computes; a missing input shape and a file that is neither
are clear errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lite
from converter.api import Converter, FmkType
from converter.ir import ConverterError


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


def run(path, x):
    m = lite.Model()
    m.build_from_file(path, lite.ModelType.MINDIR_LITE, lite.Context())
    return m.predict({m.get_inputs()[0].name: x})[0].get_data_to_numpy()


@pytest.fixture
def net():
    torch.manual_seed(0)
    return Net().eval()


def test_torchscript(net, tmp_path):
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    torch.jit.save(torch.jit.script(net), str(tmp_path / "net.pt"))
    path = Converter().convert(FmkType.PYTORCH, str(tmp_path / "net.pt"), str(tmp_path / "net"),
                               input_shape="x:2,3,16,16").output_file
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(run(path, x), want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ConverterError, match="--inputShape for x"):
        Converter().convert(FmkType.PYTORCH, str(tmp_path / "net.pt"), str(tmp_path / "other"))


def test_torch_export_archive_keeps_its_dynamic_batch(net, tmp_path):
    ep = torch.export.export(net, (torch.zeros(2, 3, 16, 16),),
                             dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1, max=32)}})
    torch.export.save(ep, str(tmp_path / "net.pt2"))
    path = Converter().convert(FmkType.PYTORCH, str(tmp_path / "net.pt2"), str(tmp_path / "net")).output_file
    for batch in (1, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 16, 16)).astype(np.float32)
        with torch.no_grad():
            want = net(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(run(path, x), want, rtol=1e-4, atol=1e-5)


def test_not_a_pytorch_archive(tmp_path):
    (tmp_path / "junk.pt").write_bytes(b"not a zip")
    with pytest.raises(ConverterError, match="not a TorchScript or torch.export archive"):
        Converter().convert(FmkType.PYTORCH, str(tmp_path / "junk.pt"), str(tmp_path / "out"))
    assert not (tmp_path / "out.ms").exists()
