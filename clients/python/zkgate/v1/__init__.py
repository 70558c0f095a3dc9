"""Generated gRPC stubs for the ``zkgate.v1`` API (``regen.sh`` rewrites them; do not edit)."""
