"""The shared model core: one ViT family with pluggable attention, block and shortcut variants."""
from .attention import Attention, RelativePositionBias, TalkingHeadsAttention
from .blocks import Block
from .gpsa import GPSA
from .shortcuts import AugmentedShortcut, CirculantLinear
from .vit import VisionTransformer
from .convert import from_timm
from . import registry  # registers the named configs with timm
from . import cmhsa_models  # noqa: F401,E402  (registers repro_cmhsa_*)
