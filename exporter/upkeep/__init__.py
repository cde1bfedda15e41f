"""Upkeep of exports: retention (prune, verify) and catch-up of what the webhook missed."""
