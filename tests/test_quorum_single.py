"""A single node runs its own one-voter quorum: it elects itself at once, and a data dir
written before the quorum (the metadata log of MetadataLog, no quorum-state) still loads."""

from __future__ import annotations

import os
import uuid

from kesque.clock import SYSTEM_CLOCK
from kesque.metadata.log import MetadataLog
from kesque.testing.broker import Broker
from wire import Api, WireClient


def test_a_metadata_log_written_before_the_quorum_still_loads(tmp_path):
    data = str(tmp_path)
    topic_id = uuid.uuid4()
    ml = MetadataLog(data, SYSTEM_CLOCK)
    ml.append([{"type": "FeatureLevelRecord", "name": "metadata.version", "feature_level": 25}])
    ml.append(
        [
            {"type": "TopicRecord", "name": "old", "topic_id": topic_id},
            {
                "type": "PartitionRecord",
                "partition_id": 0,
                "topic_id": topic_id,
                "replicas": [1],
                "isr": [1],
                "removing_replicas": [],
                "adding_replicas": [],
                "leader": 1,
                "leader_recovery_state": 0,
                "leader_epoch": 3,
                "partition_epoch": 3,
            },
        ]
    )
    ml.close()
    with Broker(data_dir=data) as b:
        with WireClient(("127.0.0.1", b.port)) as c:
            t = Api(c).metadata(["old"]).topics[0]
            assert (t.error_code, t.topic_id, t.partitions[0].leader_id, t.partitions[0].leader_epoch) == (
                0,
                topic_id,
                1,
                3,
            )
            assert Api(c).create_topics([{"name": "new"}]).topics[0].error_code == 0
        b.restart()
        with WireClient(("127.0.0.1", b.port)) as c:
            assert {t.name for t in Api(c).metadata(None).topics} == {"old", "new"}
    assert os.path.exists(os.path.join(data, "__cluster_metadata-0", "quorum-state"))
