import pytest

from lightgraph.quant import BitWidthPolicy


def test_is_abstract() -> None:
    with pytest.raises(TypeError):
        BitWidthPolicy()  # type: ignore[abstract]
