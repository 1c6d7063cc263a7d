"""The LLM layer: clients for the Anthropic Messages API (client) and OpenAI-compatible endpoints (openai_client)
with one request and answer shape, the choice between them for `[llm] provider` (factory), what each Claude model
accepts (models), retries and outages (retry), accounting and budgets (accounting), prompt templates and their
values (prompts, render, target), the tools answers come through (tools), the pre-GPU LLM verifiers
(verifiers). The loopback stand-ins of both APIs that the tests talk to are in tests/standins/.

Import the submodules directly (engine.llm.client, .verifiers, ...); this package stays cheap to import
so `engine.llm.availability` can be asked at start-up without loading an SDK.
"""
