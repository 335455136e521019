"""The model layer: which embedding and chat models pmem runs, how it fetches and loads them, and
the optional `pmem serve` process that keeps them loaded.

    embed          the embedders (the choice of one, the server's client)
    cache          ModelCache: what a process has loaded, passed to the loaders (one default per process)
    e5             pmem's own numpy engine for multilingual-e5-small
    generate       the chat models (llama.cpp) that extract and dream use
    loading        llama.cpp's loading glue: threads, buffer types, load errors
    provision      the known models, fetching and caching their files
    provision_e5   e5's weight file, from its wheel
    convert        a BERT safetensors folder to GGUF
    thresholds     each model's cosine thresholds
    serve          `pmem serve`: the resident model process and its commands' client
    serve_client   its protocol and the thin client an agent hook's process uses

This file imports nothing: an agent hook's process imports `serve_client` alone
(docs/decisions/0041-hook-process-lean.md), and `import pmem` loads no model code.
"""
