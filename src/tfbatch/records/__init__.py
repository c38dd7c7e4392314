"""Records: split input objects, form request payloads, filter/join, assemble outputs.

Pure-Python building blocks the batch-transform engine calls once per input object:
``open_input`` -> ``iter_records`` -> ``form_payloads`` (or ``join_single`` for SingleRecord
lines) -> (model) -> ``split_multi_response`` (or ``joined_outputs``, for an answer the service
wrote itself) -> ``DataProcessor.process_output`` -> ``Assembler``.
"""

from tfbatch.records.assemble import Assembler, error_line, normalize_assemble_with
from tfbatch.records.compression import GunzipStream, normalize_compression, open_input
from tfbatch.records.crc32c import crc32c, masked_crc32c
from tfbatch.records.framing import (
    RECORDIO_MAGIC,
    Record,
    RecordLimit,
    iter_records,
    normalize_split_type,
)
from tfbatch.records.writers import frame_record, write_lines, write_recordio, write_tfrecord
from tfbatch.records.join import DataProcessor, content_kind, normalize_join_source
from tfbatch.records.jsonpath import JsonPath, compile_path
from tfbatch.records.payloads import (
    JOIN_KINDS,
    JOIN_MAX_BYTES,
    Payload,
    form_payloads,
    join_single,
    joined_outputs,
    normalize_strategy,
    split_multi_response,
)

__all__ = [
    "JOIN_KINDS",
    "JOIN_MAX_BYTES",
    "RECORDIO_MAGIC",
    "Assembler",
    "DataProcessor",
    "GunzipStream",
    "JsonPath",
    "Payload",
    "Record",
    "RecordLimit",
    "compile_path",
    "content_kind",
    "crc32c",
    "error_line",
    "form_payloads",
    "frame_record",
    "iter_records",
    "join_single",
    "joined_outputs",
    "masked_crc32c",
    "normalize_assemble_with",
    "normalize_compression",
    "normalize_join_source",
    "normalize_split_type",
    "normalize_strategy",
    "open_input",
    "split_multi_response",
    "write_lines",
    "write_recordio",
    "write_tfrecord",
]
