"""The protocol: the words EchoMQ and the server share, and nothing that sends them (private).

The keyspace (``keys``), the verb table and its limits and reply decoders (``verbs``), job ids
(``ids``), payload serializers, the trace envelope, the event stream's and a job's outcome
decoding (``events``, ``results``), rate-limit text (``rates``), and how job data is shown to
people (``shown``). All of it pure: no I/O, no clock but the id minting's.

May import: ``echomq.errors`` and the scripts' loader (``echomq.scripts``), nothing else of EchoMQ
(docs/architecture.md: the bottom of the layers).
"""
