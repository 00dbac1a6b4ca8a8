"""Tests of koord-manager: webhooks, TLS, the server, the admit command."""
