"""Meeting other tools where they are: ONNX export and an onnxruntime predictor
(`onnx_export`, `onnx_runtime`), and adapters written by the `adapters` library (AdapterHub)
read into our adapter folders (`adapters_import`).

Sits above `hubcli.local` (it attaches adapters the way `hub predict` does) and below
`hubcli.api`; the core never imports it.
"""
