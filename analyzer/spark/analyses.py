"""Cross-flow analyses over a msgcap dataset, as Spark DataFrames (DESIGN §6.2).

Every function takes a ``Tables`` (the dataset's tables read once, see ``load``) and
returns a DataFrame; ``run_all`` writes each one to ``OUT/<name>/`` as Parquet.  Tables
a dataset does not have (no STAN traffic, an older dataset) are skipped: the analyses
cover whatever exists.  Times are nanoseconds since the epoch (``*_ns`` longs, exact)
next to Spark timestamps (microseconds) where a human reads them.

Definitions (all per capture; rows never pair across captures):

``nats_request_reply`` — one row per *request*: a PUB/HPUB sent by a client with a
  reply subject.  Its *replies* are the MSG/HMSG the server delivers on the requester's
  connection for that reply subject (``subject`` = the reply subject, or a delivery on a
  subscription whose subject is exactly the reply subject, which is how JetStream pull
  requests are answered), from the request until the next request with the same reply
  subject on that connection.  A delivery whose header status is 503 is the server's
  *no responders* answer, not a reply.  ``latency_ns`` = first reply's ``ts_last`` −
  request's ``ts_first`` (requester side: from the first byte of the request leaving to
  the last byte of the answer arriving).  On the responder side, ``responder_pubs``
  counts PUB/HPUB to the reply subject from other connections in the same interval and
  ``first_responder_record_id`` is the first of them.
``delivery_fanout`` — one row per PUB/HPUB: the MSG/HMSG deliveries with the same
  subject and payload SHA-256 whose ``ts_first`` is in ``[publish ts_first, publish
  ts_first + window]``; a delivery belongs to the most recent such publish (identical
  messages published twice are not double counted).  ``deliveries``, distinct
  ``subscriptions`` (connection, sid) and ``connections``, first/last delivery latency
  (delivery ``ts_last`` − publish ``ts_first``), ``delivered`` false for messages nobody
  received.
``publish_ack_latency`` — publish → ack: JetStream (a request whose reply is a PubAck
  JSON ``{"stream":..,"seq":..}`` or an API error), STAN ``PubMsg``→``PubAck`` by
  ``guid``, Liftbridge publish → Ack by ``correlation_id``, Pulsar ``SEND`` →
  ``SEND_RECEIPT``/``SEND_ERROR`` by (connection, producer id, sequence id).
``sequence_gaps`` — per consumer stream of sequence numbers: JetStream deliveries
  (``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>...`` reply subjects, and
  ``Nats-Sequence`` headers of direct gets), STAN ``MsgProto`` per subscription, Pulsar
  ``MESSAGE`` entry ids per consumer: first/last, count, gaps (jumps of more than one),
  missing numbers, redeliveries (numbers seen again / redelivery counters).
``rates`` — messages and bytes per subject per time window (published and delivered);
  ``top_talkers`` — per connection; ``error_counts`` — ``-ERR`` lines, no-responders
  statuses, anomalies by kind, flows by close reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "ANALYSES",
    "Tables",
    "delivery_fanout",
    "error_counts",
    "load",
    "nats_request_reply",
    "publish_ack_latency",
    "rates",
    "run_all",
    "sequence_gaps",
    "top_talkers",
]

PUBS = ("PUB", "HPUB")
MSGS = ("MSG", "HMSG")
NO_RESPONDERS = 503


@dataclass
class Tables:
    """The dataset's tables as DataFrames (absent tables are missing from ``dfs``)."""

    spark: SparkSession
    dataset: str
    dfs: dict[str, DataFrame] = field(default_factory=dict)
    # results already computed (``run_all`` puts the written ones here for reuse)
    memo: dict[str, DataFrame] = field(default_factory=dict)

    def get(self, name: str) -> DataFrame | None:
        return self.dfs.get(name)


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name


def _exists(spark: SparkSession, path: str) -> bool:
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return bool(fs.exists(hpath))


def _read(spark: SparkSession, dataset: str, spec) -> DataFrame:
    """``analyzer.sink.read_spark_table`` (paths and object-store URIs): timestamps as
    ``TimestampType`` and the exact ``<name>_ns`` longs, both stored in the files."""
    from analyzer.sink import read_spark_table

    return read_spark_table(spark, dataset, spec)


def load(spark: SparkSession, dataset: str) -> Tables:
    """Read every table of ``dataset`` that exists (declared by the installed dissectors)."""
    from analyzer.pipeline import tables_for
    from dissectors.registry import discover
    from dissectors.schema import register_table

    registry = discover()
    for spec in registry.tables():
        register_table(spec)
    dataset = str(dataset)
    tables = Tables(spark, dataset)
    for spec in tables_for(registry):
        path = _join(dataset, spec.name)
        if _exists(spark, path):
            try:
                tables.dfs[spec.name] = _read(spark, dataset, spec)
            except NotImplementedError:  # a nested timestamp Spark cannot read
                continue
    return tables


def _empty(spark: SparkSession, ddl: str) -> DataFrame:
    return spark.createDataFrame([], ddl)


def _client_names(t: Tables) -> DataFrame | None:
    """(capture_id, flow_id, client_name) from CONNECT."""
    from pyspark.sql import functions as F

    nats = t.get("nats")
    if nats is None:
        return None
    return (
        nats.where((F.col("op") == "CONNECT") & F.col("client_name").isNotNull())
        .groupBy("capture_id", "flow_id")
        .agg(F.first("client_name", ignorenulls=True).alias("client_name"))
    )


# --------------------------------------------------------------------- request/reply

_RR_DDL = (
    "capture_id string, flow_id long, request_record_id long, request_subject string, "
    "reply_subject string, request_ts timestamp, request_ts_ns long, answered boolean, "
    "no_responders boolean, replies long, latency_ns long, first_reply_record_id long, "
    "no_responders_record_id long, responder_pubs long, first_responder_record_id long, "
    "responder_flow_id long, client_name string"
)


def nats_request_reply(t: Tables) -> DataFrame:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    nats = t.get("nats")
    if nats is None:
        return _empty(t.spark, _RR_DDL)
    req = (
        nats.where(F.col("op").isin(*PUBS) & (F.col("direction") == "c2s")
                   & F.col("reply_to").isNotNull())
        .select(
            "capture_id", "flow_id",
            F.col("record_id").alias("request_record_id"),
            F.col("subject").alias("request_subject"),
            F.col("reply_to").alias("reply_subject"),
            F.col("ts_first").alias("request_ts"),
            F.col("ts_first_ns").alias("request_ts_ns"),
        )
    )
    w = Window.partitionBy("capture_id", "flow_id", "reply_subject").orderBy(
        "request_ts_ns", "request_record_id")
    req = req.withColumn("until_ns", F.lead("request_ts_ns").over(w))
    # subscriptions whose subject is exactly a reply subject (pull-request inboxes)
    subs = nats.where((F.col("op") == "SUB") & (F.col("direction") == "c2s")).select(
        F.col("capture_id").alias("s_cap"), F.col("flow_id").alias("s_flow"),
        F.col("subject").alias("sub_subject"), F.col("sid").alias("ssid"))
    dl = nats.where(F.col("op").isin(*MSGS) & (F.col("direction") == "s2c")).select(
        F.col("capture_id").alias("d_cap"), F.col("flow_id").alias("d_flow"),
        F.col("record_id").alias("d_rid"),
        F.col("subject").alias("d_subject"), F.col("sid").alias("d_sid"),
        F.col("ts_first_ns").alias("d_first"), F.col("ts_last_ns").alias("d_last"),
        F.col("status_code").alias("d_status"),
    )
    keep = ["capture_id", "request_record_id", "request_ts_ns", "until_ns", "d_rid",
            "d_first", "d_last", "d_status"]
    by_subject = req.join(
        dl, (F.col("capture_id") == F.col("d_cap")) & (F.col("flow_id") == F.col("d_flow"))
        & (F.col("d_subject") == F.col("reply_subject")), "inner",
    ).select(*keep)
    req_sids = req.join(
        subs, (F.col("capture_id") == F.col("s_cap")) & (F.col("flow_id") == F.col("s_flow"))
        & (F.col("sub_subject") == F.col("reply_subject")), "inner",
    )
    by_sid = req_sids.join(
        dl, (F.col("capture_id") == F.col("d_cap")) & (F.col("flow_id") == F.col("d_flow"))
        & (F.col("d_sid") == F.col("ssid")) & (F.col("d_subject") != F.col("reply_subject")),
        "inner",
    ).select(*keep)
    cand = by_subject.unionByName(by_sid).where(
        (F.col("d_first") >= F.col("request_ts_ns"))
        & (F.col("until_ns").isNull() | (F.col("d_first") < F.col("until_ns")))
    )
    is_nr = F.coalesce(F.col("d_status") == NO_RESPONDERS, F.lit(False))
    agg = cand.groupBy("capture_id", "request_record_id").agg(
        F.sum(F.when(~is_nr, 1).otherwise(0)).alias("replies"),
        F.max(is_nr.cast("int")).alias("nr"),
        F.min(F.when(~is_nr, F.struct("d_first", "d_last", "d_rid"))).alias("first"),
        F.min(F.when(is_nr, F.col("d_rid"))).alias("no_responders_record_id"),
    )
    # responder side: PUBs to the reply subject from other connections
    rp = nats.where(F.col("op").isin(*PUBS) & (F.col("direction") == "c2s")).select(
        F.col("capture_id").alias("r_cap"), F.col("flow_id").alias("r_flow"),
        F.col("record_id").alias("r_rid"), F.col("subject").alias("r_subject"),
        F.col("ts_first_ns").alias("r_ts"),
    )
    resp = req.join(
        rp, (F.col("capture_id") == F.col("r_cap")) & (F.col("r_subject") == F.col("reply_subject"))
        & (F.col("r_flow") != F.col("flow_id")) & (F.col("r_ts") >= F.col("request_ts_ns"))
        & (F.col("until_ns").isNull() | (F.col("r_ts") < F.col("until_ns"))), "inner",
    ).groupBy("capture_id", "request_record_id").agg(
        F.count("*").alias("responder_pubs"),
        F.min(F.struct("r_ts", "r_rid", "r_flow")).alias("firstr"),
    )
    out = req.join(agg, ["capture_id", "request_record_id"], "left").join(
        resp, ["capture_id", "request_record_id"], "left")
    replies = F.coalesce(F.col("replies"), F.lit(0)).cast("long")
    out = out.select(
        "capture_id", "flow_id", "request_record_id", "request_subject", "reply_subject",
        "request_ts", "request_ts_ns",
        (replies > 0).alias("answered"),
        F.coalesce(F.col("nr") == 1, F.lit(False)).alias("no_responders"),
        replies.alias("replies"),
        (F.col("first.d_last") - F.col("request_ts_ns")).alias("latency_ns"),
        F.col("first.d_rid").alias("first_reply_record_id"),
        "no_responders_record_id",
        F.coalesce(F.col("responder_pubs"), F.lit(0)).cast("long").alias("responder_pubs"),
        F.col("firstr.r_rid").alias("first_responder_record_id"),
        F.col("firstr.r_flow").alias("responder_flow_id"),
    )
    names = _client_names(t)
    out = out.join(names, ["capture_id", "flow_id"], "left")
    return out


# --------------------------------------------------------------------- fan-out

_FAN_DDL = (
    "capture_id string, flow_id long, record_id long, op string, subject string, "
    "payload_sha256 string, payload_len long, ts timestamp, ts_ns long, deliveries long, "
    "subscriptions long, connections long, first_latency_ns long, last_latency_ns long, "
    "delivered boolean, client_name string"
)


def delivery_matches(t: Tables, window_ns: int = 10_000_000_000) -> DataFrame | None:
    """One row per delivery that matched a publish (the pairs behind ``delivery_fanout``)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    nats = t.get("nats")
    if nats is None:
        return None
    base = nats.where(F.col("payload_sha256").isNotNull() & F.col("subject").isNotNull())
    pubs = base.where(F.col("op").isin(*PUBS) & (F.col("direction") == "c2s")).select(
        "capture_id", "subject", "payload_sha256", F.lit(0).alias("kind"),
        F.col("ts_first_ns").alias("t"), F.col("record_id").alias("rid"),
        F.col("flow_id").alias("fid"), F.lit(None).cast("string").alias("sid"),
        F.col("ts_last_ns").alias("t_last"),
    )
    dels = base.where(F.col("op").isin(*MSGS) & (F.col("direction") == "s2c")).select(
        "capture_id", "subject", "payload_sha256", F.lit(1).alias("kind"),
        F.col("ts_first_ns").alias("t"), F.col("record_id").alias("rid"),
        F.col("flow_id").alias("fid"), F.col("sid"), F.col("ts_last_ns").alias("t_last"),
    )
    w = (Window.partitionBy("capture_id", "subject", "payload_sha256")
         .orderBy("t", "kind", "rid").rowsBetween(Window.unboundedPreceding, Window.currentRow))
    both = pubs.unionByName(dels).withColumn(
        "pub", F.last(F.when(F.col("kind") == 0, F.struct("t", "rid")), ignorenulls=True).over(w)
    )
    return both.where(
        (F.col("kind") == 1) & F.col("pub").isNotNull()
        & (F.col("t") - F.col("pub.t") <= window_ns)
    ).select(
        "capture_id", F.col("pub.rid").alias("pub_record_id"),
        F.col("rid").alias("delivery_record_id"), F.col("fid").alias("delivery_flow_id"),
        "sid", (F.col("t_last") - F.col("pub.t")).alias("latency_ns"),
    )


def delivery_fanout(t: Tables, window_ns: int = 10_000_000_000) -> DataFrame:
    from pyspark.sql import functions as F

    nats = t.get("nats")
    m = delivery_matches(t, window_ns)
    if nats is None or m is None:
        return _empty(t.spark, _FAN_DDL)
    pubs = nats.where(F.col("op").isin(*PUBS) & (F.col("direction") == "c2s")).select(
        "capture_id", "flow_id", "record_id", "op", "subject", "payload_sha256", "payload_len",
        F.col("ts_first").alias("ts"), F.col("ts_first_ns").alias("ts_ns"),
    )
    agg = m.groupBy(F.col("capture_id").alias("cap"), "pub_record_id").agg(
        F.count("*").alias("deliveries"),
        F.countDistinct("delivery_flow_id", "sid").alias("subscriptions"),
        F.countDistinct("delivery_flow_id").alias("connections"),
        F.min("latency_ns").alias("first_latency_ns"),
        F.max("latency_ns").alias("last_latency_ns"),
    )
    out = pubs.join(agg, (pubs.capture_id == agg.cap) & (pubs.record_id == agg.pub_record_id),
                    "left").drop("cap", "pub_record_id")
    out = out.select(
        *[c for c in pubs.columns],
        F.coalesce("deliveries", F.lit(0)).cast("long").alias("deliveries"),
        F.coalesce("subscriptions", F.lit(0)).cast("long").alias("subscriptions"),
        F.coalesce("connections", F.lit(0)).cast("long").alias("connections"),
        "first_latency_ns", "last_latency_ns",
        (F.coalesce("deliveries", F.lit(0)) > 0).alias("delivered"),
    )
    names = _client_names(t)
    return out.join(names, ["capture_id", "flow_id"], "left")


# --------------------------------------------------------------------- publish → ack

_ACK_DDL = (
    "capture_id string, protocol string, flow_id long, publish_record_id long, "
    "subject string, publish_ts timestamp, publish_ts_ns long, ack_record_id long, "
    "acked boolean, error string, stream string, sequence long, latency_ns long"
)


def _jetstream_acks(t: Tables) -> DataFrame | None:
    from pyspark.sql import functions as F

    nats = t.get("nats")
    if nats is None:
        return None
    rr = t.memo.get("nats_request_reply")
    if rr is None:
        rr = nats_request_reply(t)
    rr = rr.where(~F.col("request_subject").startswith("$JS.API."))
    dl = nats.where(F.col("op").isin(*MSGS)).select(
        F.col("capture_id").alias("cap"), F.col("record_id").alias("rid"),
        F.col("payload").cast("string").alias("body"), F.col("ts_last_ns").alias("t"),
    )
    j = rr.join(dl, (rr.capture_id == dl.cap) & (rr.first_reply_record_id == dl.rid), "inner")
    stream = F.get_json_object("body", "$.stream")
    err = F.get_json_object("body", "$.error.description")
    j = j.where(F.col("body").startswith("{") & (stream.isNotNull() | err.isNotNull()))
    return j.select(
        "capture_id", F.lit("jetstream").alias("protocol"), "flow_id",
        F.col("request_record_id").alias("publish_record_id"),
        F.col("request_subject").alias("subject"), F.col("request_ts").alias("publish_ts"),
        F.col("request_ts_ns").alias("publish_ts_ns"),
        F.col("first_reply_record_id").alias("ack_record_id"),
        stream.isNotNull().alias("acked"), err.alias("error"), stream.alias("stream"),
        F.get_json_object("body", "$.seq").cast("long").alias("sequence"),
        "latency_ns",
    )


def _pair_acks(pub: DataFrame, ack: DataFrame, keys: list[str], protocol: str) -> DataFrame:
    """Each publish with the first ack after it that carries the same ``keys``."""
    from pyspark.sql import functions as F

    a = ack.select(
        *[F.col(k).alias(f"a_{k}") for k in ["capture_id", *keys]],
        F.col("record_id").alias("ack_record_id"), F.col("ts_last_ns").alias("a_t"),
        F.col("a_error"),
    )
    cond = [pub["capture_id"] == a["a_capture_id"]]
    cond += [pub[k] == a[f"a_{k}"] for k in keys]
    cond.append(a["a_t"] >= pub["ts_first_ns"])
    j = pub.join(a, cond, "left").groupBy(
        "capture_id", "flow_id", "record_id", "subject", "ts_first", "ts_first_ns"
    ).agg(F.min(F.struct("a_t", "ack_record_id", "a_error")).alias("a"))
    return j.select(
        "capture_id", F.lit(protocol).alias("protocol"), "flow_id",
        F.col("record_id").alias("publish_record_id"), "subject",
        F.col("ts_first").alias("publish_ts"), F.col("ts_first_ns").alias("publish_ts_ns"),
        F.col("a.ack_record_id").alias("ack_record_id"),
        (F.col("a.ack_record_id").isNotNull() & F.col("a.a_error").isNull()).alias("acked"),
        F.col("a.a_error").alias("error"), F.lit(None).cast("string").alias("stream"),
        F.lit(None).cast("long").alias("sequence"),
        (F.col("a.a_t") - F.col("ts_first_ns")).alias("latency_ns"),
    )


def _has(df: DataFrame, *cols: str) -> bool:
    return all(c in df.columns for c in cols)


def publish_ack_latency(t: Tables) -> DataFrame:
    from pyspark.sql import functions as F

    parts = []
    js = _jetstream_acks(t)
    if js is not None:
        parts.append(js)
    stan = t.get("stan")
    if stan is not None and _has(stan, "msg_type", "guid"):
        # the publisher's side: PubMsg sent (c2s), PubAck delivered to it (s2c); the
        # STAN server's own connection carries the same messages the other way
        pub = stan.where((F.col("msg_type") == "PubMsg") & (F.col("direction") == "c2s")
                         ).withColumn(
            "subject", F.col("channel") if "channel" in stan.columns else F.lit(None))
        err = F.col("error") if "error" in stan.columns else F.lit(None).cast("string")
        ack = stan.where((F.col("msg_type") == "PubAck") & (F.col("direction") == "s2c")
                         ).withColumn(
            "a_error", F.when(err != "", err))
        parts.append(_pair_acks(pub, ack, ["guid"], "stan"))
    lb = t.get("liftbridge")
    if lb is not None and _has(lb, "msg_type", "correlation_id"):
        pub = lb.where(F.col("msg_type").isin("PublishRequest", "Publish")
                       & F.col("correlation_id").isNotNull())
        if "stream" in lb.columns:
            pub = pub.withColumn("subject", F.col("stream"))
        err = F.col("ack_error") if "ack_error" in lb.columns else F.lit(None).cast("string")
        ack = lb.where(F.col("msg_type").isin("Ack", "PublishResponse")
                       & F.col("correlation_id").isNotNull()).withColumn(
            "a_error", F.when(~F.coalesce(err, F.lit("OK")).isin("OK", ""), err))
        parts.append(_pair_acks(pub, ack, ["correlation_id"], "liftbridge"))
    pc = t.get("pulsar_commands")
    if pc is not None and _has(pc, "command", "producer_id", "sequence_id"):
        pub = pc.where(F.col("command") == "SEND").withColumn(
            "subject", F.col("topic") if "topic" in pc.columns else F.lit(None))
        ack = pc.where(F.col("command").isin("SEND_RECEIPT", "SEND_ERROR")).withColumn(
            "a_error", F.when(F.col("command") == "SEND_ERROR",
                              F.coalesce(F.col("error_code"), F.lit("SEND_ERROR"))))
        parts.append(_pair_acks(pub, ack, ["flow_id", "producer_id", "sequence_id"], "pulsar"))
    if not parts:
        return _empty(t.spark, _ACK_DDL)
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


# --------------------------------------------------------------------- sequences

_SEQ_DDL = (
    "capture_id string, protocol string, stream string, consumer string, flow_id long, "
    "first_seq long, last_seq long, messages long, distinct_seqs long, gaps long, "
    "missing long, redeliveries long"
)


def _seq_summary(df: DataFrame, protocol: str) -> DataFrame:
    """``df``: capture_id, stream, consumer, flow_id, seq, redelivered (bool)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = ["capture_id", "stream", "consumer", "flow_id"]
    firsts = df.groupBy(*keys, "seq").agg(
        F.count("*").alias("n"), F.max(F.col("redelivered").cast("int")).alias("re"))
    w = Window.partitionBy(*keys).orderBy("seq")
    steps = firsts.withColumn("step", F.col("seq") - F.lag("seq").over(w))
    return steps.groupBy(*keys).agg(
        F.min("seq").alias("first_seq"), F.max("seq").alias("last_seq"),
        F.sum("n").cast("long").alias("messages"), F.count("*").alias("distinct_seqs"),
        F.sum(F.when(F.col("step") > 1, 1).otherwise(0)).cast("long").alias("gaps"),
        F.sum(F.when(F.col("step") > 1, F.col("step") - 1).otherwise(0)).cast("long")
        .alias("missing"),
        (F.sum(F.col("n") - 1) + F.sum(F.when((F.col("n") == 1) & (F.col("re") == 1), 1)
                                       .otherwise(0))).cast("long").alias("redeliveries"),
    ).select("capture_id", F.lit(protocol).alias("protocol"), "stream", "consumer", "flow_id",
             "first_seq", "last_seq", "messages", "distinct_seqs", "gaps", "missing",
             "redeliveries")


def sequence_gaps(t: Tables) -> DataFrame:
    from pyspark.sql import functions as F

    parts = []
    nats = t.get("nats")
    if nats is not None:
        d = nats.where(F.col("op").isin(*MSGS) & (F.col("direction") == "s2c"))
        acks = d.where(F.col("reply_to").startswith("$JS.ACK.")).select(
            "capture_id", "flow_id", F.split("reply_to", r"\.").alias("p"))
        # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>, or the v2
        # form with <domain>.<account hash> before <stream> (12+ tokens)

        def tok(i: int):
            return F.expr(f"element_at(p, {i} + 1 + (CASE WHEN size(p) >= 12 THEN 4 ELSE 2 END))")

        js = acks.select(
            "capture_id", "flow_id", tok(0).alias("stream"), tok(1).alias("consumer"),
            tok(4).cast("long").alias("seq"), (tok(2).cast("long") > 1).alias("redelivered"),
        )
        parts.append(_seq_summary(js, "jetstream"))
        hdr = d.where(F.col("headers").isNotNull()).select(
            "capture_id", "flow_id",
            F.element_at(F.col("headers"), "Nats-Stream").getItem(0).alias("stream"),
            F.element_at(F.col("headers"), "Nats-Sequence").getItem(0).cast("long").alias("seq"),
        ).where(F.col("seq").isNotNull()).select(
            "capture_id", "flow_id", "stream", F.lit("(direct)").alias("consumer"), "seq",
            F.lit(False).alias("redelivered"))
        parts.append(_seq_summary(hdr, "jetstream-header"))
    stan = t.get("stan")
    if stan is not None and _has(stan, "msg_type", "sequence"):
        sub = F.col("subject") if "subject" in stan.columns else F.col("channel")
        red = F.coalesce(F.col("redelivered"), F.lit(False)) if "redelivered" in stan.columns \
            else F.lit(False)
        ms = stan.where((F.col("msg_type") == "MsgProto") & (F.col("direction") == "s2c")
                        ).select(
            "capture_id", "flow_id", F.col("channel").alias("stream"), sub.alias("consumer"),
            F.col("sequence").alias("seq"), red.alias("redelivered"))
        parts.append(_seq_summary(ms, "stan"))
    pc = t.get("pulsar_commands")
    if pc is not None and _has(pc, "command", "consumer_id", "entry_id", "ledger_id"):
        red = (F.coalesce(F.col("redelivery_count"), F.lit(0)) > 0) \
            if "redelivery_count" in pc.columns else F.lit(False)
        ms = pc.where(F.col("command") == "MESSAGE").select(
            "capture_id", "flow_id",
            F.concat_ws(":", F.lit("ledger"), F.col("ledger_id").cast("string")).alias("stream"),
            F.col("consumer_id").cast("string").alias("consumer"),
            F.col("entry_id").alias("seq"), red.alias("redelivered"))
        parts.append(_seq_summary(ms, "pulsar"))
    if not parts:
        return _empty(t.spark, _SEQ_DDL)
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


# --------------------------------------------------------------------- rates


def rates(t: Tables, window: str = "1 second") -> DataFrame:
    """Messages and payload bytes per subject per time window, published vs delivered."""
    from pyspark.sql import functions as F

    nats = t.get("nats")
    if nats is None:
        return _empty(t.spark, "capture_id string, window_start timestamp, window_end "
                      "timestamp, subject string, published long, delivered long, "
                      "published_bytes long, delivered_bytes long")
    m = nats.where(F.col("op").isin(*PUBS, *MSGS))
    pub = F.col("op").isin(*PUBS)
    return (
        m.groupBy("capture_id", F.window("ts_first", window).alias("w"), "subject")
        .agg(
            F.sum(pub.cast("long")).alias("published"),
            F.sum((~pub).cast("long")).alias("delivered"),
            F.sum(F.when(pub, F.col("payload_len")).otherwise(0)).alias("published_bytes"),
            F.sum(F.when(~pub, F.col("payload_len")).otherwise(0)).alias("delivered_bytes"),
        )
        .select("capture_id", F.col("w.start").alias("window_start"),
                F.col("w.end").alias("window_end"), "subject", "published", "delivered",
                "published_bytes", "delivered_bytes")
    )


def top_talkers(t: Tables) -> DataFrame:
    """Per connection: NATS messages sent and received, bytes, from the flows table."""
    from pyspark.sql import functions as F

    flows = t.get("flows")
    if flows is None:
        return _empty(t.spark, "capture_id string, flow_id long")
    out = flows.select(
        "capture_id", "flow_id", "protocol", "client_ip", "client_port", "server_ip",
        "server_port", (F.col("stream_bytes_c2s") + F.col("stream_bytes_s2c")).alias("bytes"),
        "stream_bytes_c2s", "stream_bytes_s2c",
        (F.col("packets_c2s") + F.col("packets_s2c")).alias("packets"),
    )
    nats = t.get("nats")
    if nats is not None:
        counts = nats.groupBy(F.col("capture_id").alias("cap"), F.col("flow_id").alias("fid")
                              ).agg(
            F.sum(F.col("op").isin(*PUBS).cast("long")).alias("published"),
            F.sum(F.col("op").isin(*MSGS).cast("long")).alias("delivered"),
            F.count("*").alias("nats_ops"),
        )
        out = out.join(counts, (out.capture_id == counts.cap) & (out.flow_id == counts.fid),
                       "left").drop("cap", "fid")
        out = out.join(_client_names(t), ["capture_id", "flow_id"], "left")
    return out.orderBy(F.desc("bytes"))


def error_counts(t: Tables) -> DataFrame:
    """``(capture_id, source, kind, count)``: -ERR texts, no-responders statuses, anomaly
    kinds, flow close reasons."""
    from pyspark.sql import functions as F

    parts = []
    nats = t.get("nats")
    if nats is not None:
        parts.append(nats.where(F.col("op") == "-ERR").groupBy("capture_id").agg(
            F.count("*").alias("count"), F.first("error").alias("kind")
        ).select("capture_id", F.lit("nats -ERR").alias("source"), "kind", "count"))
        parts.append(nats.where(F.col("op").isin(*MSGS) & F.col("status_code").isNotNull())
                     .groupBy("capture_id", F.col("status_code").cast("string").alias("kind"))
                     .agg(F.count("*").alias("count"))
                     .select("capture_id", F.lit("nats status").alias("source"), "kind",
                             "count"))
    an = t.get("anomalies")
    if an is not None:
        parts.append(an.groupBy("capture_id", "kind").agg(F.count("*").alias("count"))
                     .select("capture_id", F.lit("anomaly").alias("source"), "kind", "count"))
    flows = t.get("flows")
    if flows is not None:
        parts.append(flows.groupBy("capture_id", F.col("close_reason").alias("kind"))
                     .agg(F.count("*").alias("count"))
                     .select("capture_id", F.lit("flow close").alias("source"), "kind",
                             "count"))
    if not parts:
        return _empty(t.spark, "capture_id string, source string, kind string, count long")
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


# --------------------------------------------------------------------- runner

ANALYSES: dict[str, Callable[[Tables], DataFrame]] = {
    "nats_request_reply": nats_request_reply,
    "delivery_fanout": delivery_fanout,
    "publish_ack_latency": publish_ack_latency,
    "sequence_gaps": sequence_gaps,
    "rates": rates,
    "top_talkers": top_talkers,
    "error_counts": error_counts,
}


def _summary(name: str, df: DataFrame) -> str:
    from pyspark.sql import functions as F

    def pct(c: str):
        return F.percentile_approx(c, 0.5)

    if name == "nats_request_reply":
        n, ok, nr, med = df.agg(F.count("*"), F.sum(F.col("answered").cast("int")),
                                F.sum(F.col("no_responders").cast("int")),
                                pct("latency_ns")).first()
        return (f"{n} requests, {ok or 0} answered, {nr or 0} no responders, "
                f"median latency {(med or 0) / 1e6:.3f} ms")
    if name == "delivery_fanout":
        n, d, lost, med = df.agg(F.count("*"), F.sum("deliveries"),
                                 F.sum((~F.col("delivered")).cast("int")),
                                 pct("first_latency_ns")).first()
        return (f"{n} publishes, {d or 0} deliveries, {lost or 0} never delivered, "
                f"median delivery latency {(med or 0) / 1e6:.3f} ms")
    if name == "publish_ack_latency":
        rows = df.groupBy("protocol").agg(F.count("*"), F.sum(F.col("acked").cast("int"))
                                          ).collect()
        return "; ".join(f"{p}: {c} publishes, {a} acked" for p, c, a in rows) or "0 rows"
    if name == "sequence_gaps":
        n, g, m, r = df.agg(F.count("*"), F.sum("gaps"), F.sum("missing"),
                            F.sum("redeliveries")).first()
        return f"{n} sequences, {g or 0} gaps ({m or 0} missing), {r or 0} redeliveries"
    return f"{df.count()} rows"


def run_all(spark: SparkSession, dataset: str, out: str, *, names: list[str] | None = None,
            mode: str = "overwrite", echo: Callable[[str], Any] = print) -> dict[str, str]:
    """Run the analyses on ``dataset`` and write each to ``out/<name>/`` (Parquet);
    returns the one-line summaries by name."""
    t = load(spark, dataset)
    summaries = {}
    for name in names or list(ANALYSES):
        df = ANALYSES[name](t)
        df.write.mode(mode).parquet(_join(str(out), name))
        written = spark.read.parquet(_join(str(out), name))
        t.memo[name] = written
        summaries[name] = _summary(name, written)
        echo(f"{name}: {summaries[name]}")
    return summaries
