"""The reliability campaign (issue 22): kill -9 with a write ledger, socket and plugin-RPC fuzzing, schemathesis
against the web API, and a load of concurrent clients -- all against real `homeagent run` processes.

Run it with `python -m bench.campaign [--size ci|small|full] [--only kill9,socket,rpc,api,load]`;
docs/RELIABILITY.md has the figures of the largest run.
"""
