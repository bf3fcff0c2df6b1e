"""kesque's Envelope against Kafka 4.4's own classes (issue 27): Kafka's
DefaultKafkaPrincipalBuilder serializes principals to the bytes kesque writes and reads kesque's
back, and Kafka's RequestHeader / AbstractRequest parse the request data a kesque broker puts in
an Envelope, as a Kafka controller's EnvelopeUtils does. One JVM, a single-file Java program."""

from __future__ import annotations

import datetime
import subprocess

import oracle
from kesque.protocol.api import RequestHeader
from kesque.protocol.api_keys import ApiKeys
from kesque.security.principal import KafkaPrincipal
from kesque.server import envelope
from kesque.testing import kafka as K
from wire import Msg

pytestmark = oracle.MARKS

JAVA = """
import java.nio.ByteBuffer;
import java.util.HexFormat;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.requests.AbstractRequest;
import org.apache.kafka.common.requests.RequestHeader;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder;

public class EnvelopeOracle {
  public static void main(String[] args) {
    DefaultKafkaPrincipalBuilder serde = new DefaultKafkaPrincipalBuilder(null, null);
    HexFormat hex = HexFormat.of();
    for (int i = 0; i + 2 < args.length; i += 3) {
      if (args[i].equals("principal")) {
        KafkaPrincipal p = new KafkaPrincipal(args[i + 1], args[i + 2]);
        System.out.println(hex.formatHex(serde.serialize(p)));
      } else if (args[i].equals("read")) {
        System.out.println(serde.deserialize(hex.parseHex(args[i + 1])));
      } else {
        ByteBuffer buf = ByteBuffer.wrap(hex.parseHex(args[i + 1]));
        RequestHeader h = RequestHeader.parse(buf);
        ByteBufferAccessor body = new ByteBufferAccessor(buf);
        AbstractRequest r = AbstractRequest.parseRequest(h.apiKey(), h.apiVersion(), body).request;
        System.out.println(h.apiKey() + " v" + h.apiVersion() + " " + h.correlationId() + " " + h.clientId()
            + " " + r.data());
      }
    }
  }
}
"""

PRINCIPALS = [KafkaPrincipal("User", "alice"), KafkaPrincipal("User", "ANONYMOUS"), KafkaPrincipal("Group", "ops:é")]


def test_kafka_reads_and_writes_the_envelopes_principal_and_request_as_kesque(tmp_path):
    src = tmp_path / "EnvelopeOracle.java"
    src.write_text(JAVA)
    m = Msg(ApiKeys.CREATE_TOPICS, 7)
    topic = m("CreatableTopic", name="t1", num_partitions=3, replication_factor=1, assignments=(), configs=())
    body = m(topics=(topic,), timeout=datetime.timedelta(seconds=30), validate_only=False)
    data = envelope.encode_inner_request(RequestHeader(ApiKeys.CREATE_TOPICS, 7, 1234, "adminclient-7", 0, True), body)
    args = []
    for p in PRINCIPALS:
        args += ["principal", p.type, p.name, "read", envelope.serialize_principal(p).hex(), "-"]
    args += ["request", data.hex(), "-"]
    r = subprocess.run(["java", "-cp", K.classpath(), str(src), *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    for i, p in enumerate(PRINCIPALS):
        assert lines[2 * i] == envelope.serialize_principal(p).hex(), p  # Kafka's bytes are kesque's
        assert envelope.deserialize_principal(bytes.fromhex(lines[2 * i])) == p
        assert lines[2 * i + 1] == str(p)  # and Kafka reads kesque's
    request = lines[-1]
    assert request.startswith(
        "CREATE_TOPICS v7 1234 adminclient-7 CreateTopicsRequestData(topics=[CreatableTopic(name='t1', numPartitions=3"
    )
    assert "timeoutMs=30000" in request and "validateOnly=false" in request
