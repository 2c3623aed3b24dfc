"""``pyelmo serve``: a JSON API and a page for exploring contextual vectors.

``build_service(...)`` loads a model, its LM head and the sample corpus vectors;
``create_app(service)`` is the ASGI app (FastAPI) that uvicorn runs. Needs the
``serve`` extra (``pip install 'pyelmo[serve]'``).
"""

from pyelmo.serve.app import create_app
from pyelmo.serve.schemas import Limits
from pyelmo.serve.service import Service, build_service

__all__ = ["Limits", "Service", "build_service", "create_app"]
