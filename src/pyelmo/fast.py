"""Former home of the inference fast path; kept so that older imports keep working.

The execution strategies are in :mod:`pyelmo.strategy`, the product implementations in
:mod:`pyelmo.kernels`, the token cache in :mod:`pyelmo.encoder`.
"""

from pyelmo.encoder import TokenCache  # noqa: F401
from pyelmo.kernels import Products, bf16_supported, onednn_available, usable_bf16  # noqa: F401
