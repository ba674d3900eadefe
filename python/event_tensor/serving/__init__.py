"""Serving: text in and out of a Hugging Face model directory, continuous
batching of requests over one decode kernel, and an OpenAI-compatible HTTP
server (`event-tensor serve`). The web stack (FastAPI, uvicorn) is imported
only by `server`."""

from .engine import Engine, EngineClosed, QueueFull, Request, SamplingParams
from .model import ServedModel, open_model
from .text import StopStrings, TextCodec, TextError, TextStream

__all__ = ["Engine", "EngineClosed", "QueueFull", "Request", "SamplingParams", "ServedModel", "StopStrings",
           "TextCodec", "TextError", "TextStream", "open_model"]
