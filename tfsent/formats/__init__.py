"""Serving formats beyond TF Serving's SavedModel, one module each (`onnx`)."""
