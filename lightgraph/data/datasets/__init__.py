"""Graph sources: the :class:`GraphDataset` base, synthetic and real graphs, ``.npy`` graphs
(and their writer), on-disk views, text-attributed graphs, sets of small graphs, and edge splits for link
prediction."""

from lightgraph.data.datasets.graph_dataset import GraphDataset, validate_graph
from lightgraph.data.datasets.graph_set import SyntheticGraphSet
from lightgraph.data.datasets.link_split import (
    LinkSplit,
    LinkTrainingGraph,
    OfficialLinkSplit,
    random_link_split,
)
from lightgraph.data.datasets.npy_graph import NpyGraph
from lightgraph.data.datasets.npy_graph_writer import NpyGraphWriter, from_pyg
from lightgraph.data.datasets.on_disk import OnDiskGraph
from lightgraph.data.datasets.real_dataset import REAL_DATASETS, RealDataset
from lightgraph.data.datasets.real_link_dataset import REAL_LINK_DATASETS, RealLinkDataset
from lightgraph.data.datasets.synthetic_graph import SyntheticGraph, generate_synthetic_graph
from lightgraph.data.datasets.text_graph import (
    SPECIAL_TOKENS,
    SyntheticTextGraph,
    build_tokenizer,
    load_tokenizer,
)

__all__ = [
    "REAL_DATASETS",
    "REAL_LINK_DATASETS",
    "SPECIAL_TOKENS",
    "GraphDataset",
    "LinkSplit",
    "LinkTrainingGraph",
    "NpyGraph",
    "NpyGraphWriter",
    "OfficialLinkSplit",
    "OnDiskGraph",
    "RealDataset",
    "RealLinkDataset",
    "SyntheticGraph",
    "SyntheticGraphSet",
    "SyntheticTextGraph",
    "build_tokenizer",
    "from_pyg",
    "generate_synthetic_graph",
    "load_tokenizer",
    "random_link_split",
    "validate_graph",
]
