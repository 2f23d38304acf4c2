"""Sparkplug B metrics from a plant description, and the metric updates each stored row makes.

What a SCADA sees of one node (a Sparkplug device) comes from the plant description the node's lines name
(docs/PLANT.md, host/plantdesc.py), never from the simulator: per machine ``<machine>/state`` (the PLC state),
``<machine>/trip`` (the cause of the latest trip), per signal ``<machine>/<tag>`` (Double, with the engineering
unit, range and alarm limits as properties) and per alarm point ``<machine>/<tag>/alarm/<LEVEL>`` (the point's
state: NORMAL, RAISED, ACKED, RTN_UNACK, SHELVED); per node ``annotation`` (the committed note's text) with
``annotation/id`` (its row in the store) and ``annotation/verified``. docs/MQTT.md (Sparkplug) lists them.

Payloads are encoded by pysparkplug (the Eclipse Tahu schema through protobuf); its Metric has no property
sets, so the birth's properties are added to the encoded protobuf here (`with_properties`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pysparkplug import DataType, Metric
from pysparkplug import _protobuf as spb_pb  # the Tahu schema pysparkplug is built on (its Metric lacks properties)

from host import plantlines
from host.plantdesc import Machine, PlantDesc

ALARM_NORMAL = "NORMAL"
ANNOTATION = "annotation"
ANNOTATION_ID = "annotation/id"
ANNOTATION_VERIFIED = "annotation/verified"


def signal_metric(machine: str, tag: str) -> str:
    return "%s/%s" % (machine, tag)


def alarm_metric(machine: str, tag: str, level: str) -> str:
    return "%s/%s/alarm/%s" % (machine, tag, level)


@dataclass(frozen=True)
class MetricDef:
    """One metric of a device's birth: its name, type and properties (name -> (DataType, value))."""

    name: str
    datatype: DataType
    properties: tuple[tuple[str, DataType, object], ...] = ()


def _signal_props(s) -> tuple:
    props = [("engUnit", DataType.STRING, s.unit), ("key", DataType.STRING, s.key),
             ("deadband", DataType.DOUBLE, float(s.deadband))]
    if s.range is not None:
        props += [("engLow", DataType.DOUBLE, s.range[0]), ("engHigh", DataType.DOUBLE, s.range[1])]
    for a in s.alarms:
        props.append(("limit" + a.level, DataType.DOUBLE, a.limit))
    if s.words:
        props.append(("documentation", DataType.STRING, ", ".join(s.words)))
    return tuple(props)


def machine_defs(m: Machine) -> list[MetricDef]:
    out = [MetricDef("%s/state" % m.id, DataType.STRING, (("kind", DataType.STRING, m.kind),)),
           MetricDef("%s/trip" % m.id, DataType.STRING)]
    for s in m.signals:
        out.append(MetricDef(signal_metric(m.id, s.tag), DataType.DOUBLE, _signal_props(s)))
        for a in s.alarms:
            props = (("priority", DataType.INT32, a.priority), ("limit", DataType.DOUBLE, a.limit))
            out.append(MetricDef(alarm_metric(m.id, s.tag, a.level), DataType.STRING, props))
        if s.bad is not None:
            out.append(MetricDef(alarm_metric(m.id, s.tag, "BAD"), DataType.STRING,
                                 (("priority", DataType.INT32, int(s.bad["priority"])),)))
    return out


def device_defs(desc: PlantDesc) -> list[MetricDef]:
    """Every metric of a node running `desc`, in the description's order."""
    out = [MetricDef(ANNOTATION, DataType.STRING), MetricDef(ANNOTATION_ID, DataType.UINT64),
           MetricDef(ANNOTATION_VERIFIED, DataType.BOOLEAN)]
    for m in desc.machines:
        out += machine_defs(m)
    return out


@dataclass(frozen=True)
class Update:
    """A metric's new value from one row: None with bad quality for a `?` reading."""

    name: str
    value: object
    ts: int  # ms since 1970: the line's own time (or the annotation's episode start)
    good: bool = True


def line_updates(text: str, desc: PlantDesc | None) -> list[Update]:
    """The metric updates a stored log line makes: a sample's readings and PLC state, an alarm line's point
    state, a trip's cause and state. Lines that name what `desc` lacks, NODE lines and other grammars: []."""
    line = plantlines.parse(text)
    if line is None or desc is None or line.machine is None:
        return []
    m = desc.machine(line.machine)
    if m is None:
        return []
    ts = line.wall_ms
    if line.kind == "sample":
        out = [Update("%s/state" % m.id, line.plc, ts)]
        for key, (number, _unit) in line.values.items():
            s = m.signal(key)
            if s is not None:
                out.append(Update(signal_metric(m.id, s.tag), number, ts, number is not None))
        return out
    if line.kind == "alarm":
        s = m.signal(line.tag)
        if s is None:
            return []
        return [Update(alarm_metric(m.id, s.tag, line.level), line.astate, ts)]
    if line.kind == "state":
        out = [Update("%s/state" % m.id, line.to_state, ts)]
        if line.is_trip:
            out.append(Update("%s/trip" % m.id, line.cause, ts))
        return out
    return []


def to_metric(d: MetricDef, value: object, ts: int | None, alias: int | None, name: bool = True,
              historical: bool = False, good: bool = True) -> Metric:
    return Metric(timestamp=ts, name=d.name if name else None, datatype=d.datatype, value=value, alias=alias,
                  is_historical=historical, is_null=value is None or not good)


def _property_value(pv, datatype: DataType, value: object) -> None:
    pv.type = int(datatype)
    if datatype == DataType.STRING:
        pv.string_value = str(value)
    elif datatype == DataType.DOUBLE:
        pv.double_value = float(value)
    elif datatype == DataType.BOOLEAN:
        pv.boolean_value = bool(value)
    else:  # the integer types: int_value carries 32 bits and less
        pv.int_value = int(value) & 0xFFFFFFFF


def with_properties(raw: bytes, props: dict[str, tuple]) -> bytes:
    """The encoded payload `raw` with each named metric's properties (name -> ((key, DataType, value), ...))
    set: the births carry them, DATA messages do not repeat them."""
    p = spb_pb.Payload.FromString(raw)
    for metric in p.metrics:
        kv = props.get(metric.name)
        if not kv:
            continue
        for key, datatype, value in kv:
            metric.properties.keys.append(key)
            _property_value(metric.properties.values.add(), datatype, value)
    return p.SerializeToString()


def read_properties(metric_pb) -> dict:
    """A protobuf metric's properties as {key: value} (for consumers and tests)."""
    out = {}
    for key, pv in zip(metric_pb.properties.keys, metric_pb.properties.values):
        which = pv.WhichOneof("value")
        out[key] = getattr(pv, which) if which else None
    return out


def decode_pb(raw: bytes):
    """The protobuf Payload of raw bytes (properties included, which pysparkplug's objects drop)."""
    return spb_pb.Payload.FromString(raw)
