"""Values between the two formats: a Delta partition value or stats value read as the Iceberg type,
and written as Iceberg's single-value binary form (spec.md#binary-single-value-serialization) or
as Avro in a manifest's partition tuple (spec.md#avro).

Python forms: int for int/long, days for date, microseconds since the epoch for timestamps
(UTC for `timestamptz`), Decimal for decimals, bytes for binary.
"""

from __future__ import annotations

import re
import struct
from datetime import date, datetime, timezone
from decimal import Decimal, InvalidOperation
from typing import Any

from exporter.errors import IcebergUnsupported
from exporter.iceberg.schema import decimal_of

_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_TIMESTAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
                        r"\s*(Z|[+-]\d{2}:?\d{2})?")
_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_PACKED = {"int": "<i", "date": "<i", "long": "<q", "timestamp": "<q", "timestamptz": "<q", "float": "<f",
           "double": "<d"}


def partition_value(text: str | None, iceberg_type: str, column: str) -> Any:
    """A `partitionValues` string as the Iceberg type (PROTOCOL.md#partition-value-serialization):
    an empty string or none is null. A timestamp without an offset is taken as UTC, which is what
    delta-rs and Delta Spark in UTC write (the protocol leaves it to the writer's time zone)."""
    if text is None or text == "":
        return None
    try:
        return _parsed(text, iceberg_type)
    except (ValueError, InvalidOperation) as error:
        raise IcebergUnsupported(f"partition column {column!r}: value {text!r} is not a {iceberg_type} "
                                 f"({error})") from None


def _parsed(text: str, iceberg_type: str) -> Any:
    if iceberg_type == "string":
        return text
    if iceberg_type in ("int", "long"):
        return int(text)
    if iceberg_type in ("float", "double"):
        return float(text)
    if iceberg_type == "boolean":
        if text.lower() not in ("true", "false"):
            raise ValueError("not true or false")
        return text.lower() == "true"
    if iceberg_type == "date":
        return date_days(text)
    if iceberg_type in ("timestamp", "timestamptz"):
        return timestamp_micros(text)[0]
    if iceberg_type == "binary":
        return text.encode("latin-1")  # "\u0001\u0002": one character per byte
    if decimal := decimal_of(iceberg_type):
        return scaled(Decimal(text), decimal[1])
    raise ValueError(f"no partition values of type {iceberg_type}")


def date_days(text: str) -> int:
    match = _DATE.fullmatch(text.strip())
    if not match:
        raise ValueError("not YYYY-MM-DD")
    return date(*map(int, match.groups())).toordinal() - _EPOCH_ORDINAL


def timestamp_micros(text: str) -> tuple[int, int, bool]:
    """(microseconds since the epoch, digits of second fractions written, whether an offset or `Z`
    was written): a time with an offset is moved to UTC, one without is taken as it reads. Digits
    past microseconds are dropped (floor)."""
    match = _TIMESTAMP.fullmatch(text.strip())
    if not match:
        raise ValueError("not a timestamp")
    year, month, day, hour, minute, second = (int(group) for group in match.groups()[:6])
    fraction = match.group(7) or ""
    days = date(year, month, day).toordinal() - _EPOCH_ORDINAL
    micros = ((days * 24 + hour) * 60 + minute) * 60 + second
    micros = micros * 1_000_000 + int((fraction + "000000")[:6])
    offset = match.group(8)
    if offset and offset != "Z":
        sign = -1 if offset[0] == "-" else 1
        digits = offset[1:].replace(":", "")
        micros -= sign * (int(digits[:2]) * 60 + int(digits[2:])) * 60_000_000
    return micros, len(fraction), offset is not None


def scaled(value: Decimal, scale: int) -> Decimal:
    """`value` at exactly `scale` digits; ValueError when that would change it."""
    exact = value.quantize(Decimal(1).scaleb(-scale))
    if exact != value:
        raise ValueError(f"{value} has more than {scale} fraction digits")
    return exact


def single_value(value: Any, iceberg_type: str) -> bytes:
    """spec.md#binary-single-value-serialization, as lower and upper bounds are stored."""
    if iceberg_type in _PACKED:
        return struct.pack(_PACKED[iceberg_type], value)
    if iceberg_type == "boolean":
        return b"\x01" if value else b"\x00"
    if iceberg_type == "string":
        return value.encode("utf-8")
    if iceberg_type == "binary":
        return bytes(value)
    if decimal_of(iceberg_type):
        unscaled = int(value.scaleb(-value.as_tuple().exponent))
        return unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)
    raise ValueError(f"no single-value form for {iceberg_type}")


def avro_type(iceberg_type: str, field_id: int) -> Any:
    """The Avro type of a partition field (spec.md#avro); optional, as a null partition can be."""
    if decimal := decimal_of(iceberg_type):
        precision, scale = decimal
        size = next(n for n in range(1, 17) if 2 ** (8 * n - 1) > 10 ** precision - 1)
        avro: Any = {"type": "fixed", "name": f"decimal_{field_id}", "size": size, "logicalType": "decimal",
                     "precision": precision, "scale": scale}
    elif iceberg_type == "date":
        avro = {"type": "int", "logicalType": "date"}
    elif iceberg_type in ("timestamp", "timestamptz"):
        avro = {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": iceberg_type == "timestamptz"}
    else:
        avro = {"int": "int", "long": "long", "float": "float", "double": "double", "boolean": "boolean",
                "string": "string", "binary": "bytes"}[iceberg_type]
    return ["null", avro]


def from_avro(value: Any) -> Any:
    """A partition value as an Avro reader returns it (dates and timestamps as objects) in this
    module's form."""
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        delta = moment - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(value, date):
        return value.toordinal() - _EPOCH_ORDINAL
    return value
