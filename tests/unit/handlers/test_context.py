from tfbatch.handlers.context import Context, parse_custom_attributes, rest_uri


def test_context_fields_are_the_containers_in_order():
    assert Context._fields == (
        "model_name", "model_version", "method", "rest_uri", "grpc_port", "channel",
        "custom_attributes", "request_content_type", "accept_header", "content_length",
    )


def test_custom_attributes_parse_tfs_keys_and_keep_others():
    attrs = parse_custom_attributes("tfs-model-name=m2, tfs-model-version=3,tfs-method=classify,trace=a=b")
    assert attrs == {"tfs-model-name": "m2", "tfs-model-version": "3", "tfs-method": "classify", "trace": "a=b"}
    assert parse_custom_attributes(None) == {}
    assert parse_custom_attributes("no-equals-sign") == {}


def test_rest_uri_matches_tfs_layout():
    assert rest_uri(8501, "m", None, "predict") == "http://localhost:8501/v1/models/m:predict"
    assert rest_uri(8501, "m", "2", "classify") == "http://localhost:8501/v1/models/m/versions/2:classify"
    assert rest_uri(None, "m", None, "predict") is None
