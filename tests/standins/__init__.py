"""Loopback stand-ins of the outside services kbench talks to (the Claude Messages API and Models API, an
OpenAI-compatible chat-completions server). Each enforces the service's documented rules, so a request the
real service would refuse fails the test that sent it; each module's docstring cites the documentation."""
