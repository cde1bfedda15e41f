"""The Delta Sharing server: the app (`app`), its routes (`shares`, `tables`), what they share
(`deps`) and its one mapping of errors to the protocol's answers (`errors`)."""

from hooks.sharing.app import create_sharing_app
from hooks.sharing.shares import page

__all__ = ["create_sharing_app", "page"]
