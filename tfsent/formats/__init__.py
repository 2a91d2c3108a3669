"""Serving formats besides TF Serving's SavedModel, one module each (`litert.py`: a
`.tflite` file for ai-edge-litert's Interpreter). The registry `FORMATS` maps a
`tfsent.export --format` name to the module that writes it."""

FORMATS = {"litert": "tfsent.formats.litert"}
