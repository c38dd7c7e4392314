"""Pre- and post-processing as the seed-000 notebook describes it: the request body is one
JPEG; it goes to TF Serving as ``{"instances": [{"b64": ...}]}`` (the signature's input is
``image_bytes``); the model's JSON answer is returned unchanged."""
import base64
import json


def input_handler(data, context):
    if context.request_content_type != "application/x-image":
        raise ValueError("expected application/x-image, got {}".format(context.request_content_type))
    encoded = base64.b64encode(data.read()).decode("ascii")
    return json.dumps({"instances": [{"b64": encoded}]})


def output_handler(response, context):
    if response.status_code != 200:
        raise ValueError("TF Serving answered {}: {}".format(response.status_code, response.content.decode("utf-8")))
    return response.content, context.accept_header
