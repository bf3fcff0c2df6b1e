"""The group, offset and transaction requests the ACL tests send (issue 27), each reduced to the
error codes it answered, so one run against kesque and one against Kafka 4.4 can be compared.

Every request names a group ``g``, a transactional id ``x`` and the topic ``t`` (one partition,
which exists) plus ``t-missing`` where a topic list is taken; a client that may do nothing gets
the authorization errors, one that may do everything gets the coordinator's own answers (an
unknown member, an unknown producer id)."""

from __future__ import annotations

import time
import uuid

from kesque.protocol.api_keys import ApiKeys
from wire import Msg, WireClient

COORDINATOR_LOAD_IN_PROGRESS = 14


def _codes(parts) -> list[int]:
    return [int(p.error_code) for p in parts]


def find_coordinator(c: WireClient, key_type: int, key: str, version: int = 4) -> int:
    m = Msg(ApiKeys.FIND_COORDINATOR, version)
    if version >= 4:
        r = c.request(ApiKeys.FIND_COORDINATOR, version, m(key_type=key_type, coordinator_keys=(key,)))
        return int(r.coordinators[0].error_code)
    r = c.request(ApiKeys.FIND_COORDINATOR, version, m(key_type=key_type, key=key))
    return int(r.error_code)


def join_group(c: WireClient, g: str) -> int:
    m = Msg(ApiKeys.JOIN_GROUP, 9)
    req = m(
        group_id=g,
        session_timeout=10000,
        rebalance_timeout=10000,
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(m("JoinGroupRequestProtocol", name="range", metadata=b""),),
        reason=None,
    )
    return int(c.request(ApiKeys.JOIN_GROUP, 9, req).error_code)


def sync_group(c: WireClient, g: str) -> int:
    m = Msg(ApiKeys.SYNC_GROUP, 5)
    req = m(
        group_id=g,
        generation_id=1,
        member_id="nobody",
        group_instance_id=None,
        protocol_type="consumer",
        protocol_name="range",
        assignments=(),
    )
    return int(c.request(ApiKeys.SYNC_GROUP, 5, req).error_code)


def heartbeat(c: WireClient, g: str) -> int:
    m = Msg(ApiKeys.HEARTBEAT, 4)
    req = m(group_id=g, generation_id=1, member_id="nobody", group_instance_id=None)
    return int(c.request(ApiKeys.HEARTBEAT, 4, req).error_code)


def leave_group(c: WireClient, g: str) -> int:
    m = Msg(ApiKeys.LEAVE_GROUP, 5)
    req = m(group_id=g, members=(m("MemberIdentity", member_id="nobody", group_instance_id=None, reason=None),))
    return int(c.request(ApiKeys.LEAVE_GROUP, 5, req).error_code)


def offset_commit(c: WireClient, g: str, topics: list[str]) -> dict:
    """A simple (generation -1) commit of offset 0 on partition 0 of each topic."""
    m = Msg(ApiKeys.OFFSET_COMMIT, 9)
    req = m(
        group_id=g,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=tuple(
            m(
                "OffsetCommitRequestTopic",
                name=t,
                partitions=(
                    m(
                        "OffsetCommitRequestPartition",
                        partition_index=0,
                        committed_offset=0,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    ),
                ),
            )
            for t in topics
        ),
    )
    r = c.request(ApiKeys.OFFSET_COMMIT, 9, req)
    return {t.name: _codes(t.partitions) for t in r.topics}


def offset_fetch(c: WireClient, g: str, topics: list[str] | None) -> dict:
    """v9: {"group": error, topic: partition errors}; ``topics`` None: all the group's."""
    m = Msg(ApiKeys.OFFSET_FETCH, 9)
    wanted = None
    if topics is not None:
        wanted = tuple(m("OffsetFetchRequestTopics", name=t, partition_indexes=(0,)) for t in topics)
    req = m(
        groups=(m("OffsetFetchRequestGroup", group_id=g, member_id=None, member_epoch=-1, topics=wanted),),
        require_stable=False,
    )
    grp = c.request(ApiKeys.OFFSET_FETCH, 9, req).groups[0]
    return {"group": int(grp.error_code), **{t.name: _codes(t.partitions) for t in grp.topics}}


def offset_delete(c: WireClient, g: str, topic: str) -> dict:
    m = Msg(ApiKeys.OFFSET_DELETE, 0)
    req = m(
        group_id=g,
        topics=(
            m(
                "OffsetDeleteRequestTopic",
                name=topic,
                partitions=(m("OffsetDeleteRequestPartition", partition_index=0),),
            ),
        ),
    )
    r = c.request(ApiKeys.OFFSET_DELETE, 0, req)
    return {"group": int(r.error_code), **{t.name: _codes(t.partitions) for t in r.topics}}


def describe_groups(c: WireClient, g: str) -> tuple[int, int]:
    """(error, authorized operations) of ``g``."""
    m = Msg(ApiKeys.DESCRIBE_GROUPS, 5)
    r = c.request(ApiKeys.DESCRIBE_GROUPS, 5, m(groups=(g,), include_authorized_operations=True))
    return int(r.groups[0].error_code), r.groups[0].authorized_operations


def list_groups(c: WireClient) -> list[str]:
    m = Msg(ApiKeys.LIST_GROUPS, 5)
    r = c.request(ApiKeys.LIST_GROUPS, 5, m(states_filter=(), types_filter=()))
    return sorted(x.group_id for x in r.groups)


def delete_groups(c: WireClient, g: str) -> int:
    m = Msg(ApiKeys.DELETE_GROUPS, 2)
    return int(c.request(ApiKeys.DELETE_GROUPS, 2, m(groups_names=(g,))).results[0].error_code)


def consumer_group_heartbeat(c: WireClient, g: str, topics: list[str]) -> tuple:
    m = Msg(ApiKeys.CONSUMER_GROUP_HEARTBEAT, 0)
    req = m(
        group_id=g,
        member_id="",
        member_epoch=0,
        instance_id=None,
        rack_id=None,
        rebalance_timeout=10000,
        subscribed_topic_names=tuple(topics),
        server_assignor=None,
        topic_partitions=(),
    )
    r = c.request(ApiKeys.CONSUMER_GROUP_HEARTBEAT, 0, req)
    return int(r.error_code), (r.member_epoch if r.error_code else None)  # (a refusal's epoch: Kafka's 0)


def init_producer_id(c: WireClient, txn: str | None) -> int:
    m = Msg(ApiKeys.INIT_PRODUCER_ID, 4)
    req = m(transactional_id=txn, transaction_timeout=10000, producer_id=-1, producer_epoch=-1)
    for _ in range(50):  # as clients do: Kafka's first id waits for its block (LOAD_IN_PROGRESS)
        code = int(c.request(ApiKeys.INIT_PRODUCER_ID, 4, req).error_code)
        if code != COORDINATOR_LOAD_IN_PROGRESS:
            return code
        time.sleep(0.1)
    return code


def add_partitions_to_txn(c: WireClient, txn: str, topics: list[str]) -> dict:
    """v3 (a client's): {topic: partition errors} for an unknown producer id."""
    m = Msg(ApiKeys.ADD_PARTITIONS_TO_TXN, 3)
    req = m(
        v3_and_below_transactional_id=txn,
        v3_and_below_producer_id=4242,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=tuple(m("AddPartitionsToTxnTopic", name=t, partitions=(0,)) for t in topics),
    )
    r = c.request(ApiKeys.ADD_PARTITIONS_TO_TXN, 3, req)
    return {
        t.name: [int(p.partition_error_code) for p in t.results_by_partition] for t in r.results_by_topic_v3_and_below
    }


def add_partitions_to_txn_v4(c: WireClient, txn: str, topic: str) -> int:
    """v4 (a broker's verification): the top-level error."""
    m = Msg(ApiKeys.ADD_PARTITIONS_TO_TXN, 4)
    req = m(
        transactions=(
            m(
                "AddPartitionsToTxnTransaction",
                transactional_id=txn,
                producer_id=4242,
                producer_epoch=0,
                verify_only=True,
                topics=(m("AddPartitionsToTxnTopic", name=topic, partitions=(0,)),),
            ),
        )
    )
    return int(c.request(ApiKeys.ADD_PARTITIONS_TO_TXN, 4, req).error_code)


def add_offsets_to_txn(c: WireClient, txn: str, g: str) -> int:
    m = Msg(ApiKeys.ADD_OFFSETS_TO_TXN, 3)
    req = m(transactional_id=txn, producer_id=4242, producer_epoch=0, group_id=g)
    return int(c.request(ApiKeys.ADD_OFFSETS_TO_TXN, 3, req).error_code)


def end_txn(c: WireClient, txn: str) -> int:
    m = Msg(ApiKeys.END_TXN, 3)
    req = m(transactional_id=txn, producer_id=4242, producer_epoch=0, committed=True)
    return int(c.request(ApiKeys.END_TXN, 3, req).error_code)


def txn_offset_commit(c: WireClient, txn: str, g: str, topics: list[str]) -> dict:
    m = Msg(ApiKeys.TXN_OFFSET_COMMIT, 3)
    req = m(
        transactional_id=txn,
        group_id=g,
        producer_id=4242,
        producer_epoch=0,
        generation_id=-1,
        member_id="",
        group_instance_id=None,
        topics=tuple(
            m(
                "TxnOffsetCommitRequestTopic",
                name=t,
                partitions=(
                    m(
                        "TxnOffsetCommitRequestPartition",
                        partition_index=0,
                        committed_offset=0,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    ),
                ),
            )
            for t in topics
        ),
    )
    r = c.request(ApiKeys.TXN_OFFSET_COMMIT, 3, req)
    return {t.name: _codes(t.partitions) for t in r.topics}


def write_txn_markers(c: WireClient, topic: str) -> list[int]:
    m = Msg(ApiKeys.WRITE_TXN_MARKERS, 1)
    req = m(
        markers=(
            m(
                "WritableTxnMarker",
                producer_id=4242,
                producer_epoch=0,
                transaction_result=False,
                topics=(m("WritableTxnMarkerTopic", name=topic, partition_indexes=(0,)),),
                coordinator_epoch=0,
            ),
        )
    )
    r = c.request(ApiKeys.WRITE_TXN_MARKERS, 1, req)
    return [int(p.error_code) for mk in r.markers for t in mk.topics for p in t.partitions]


def describe_transactions(c: WireClient, txn: str) -> int:
    """The error of ``txn``, read from the frame itself: the start time of a transaction not
    begun is -1, which the test codec will not decode as a timestamp."""
    m = Msg(ApiKeys.DESCRIBE_TRANSACTIONS, 0)
    c.send(ApiKeys.DESCRIBE_TRANSACTIONS, 0, m(transactional_ids=(txn,)))
    frame = c.recv_frame()
    # correlation id, header tags (0), throttle time, states (compact array), the first's error
    return int.from_bytes(frame[4 + 1 + 4 + 1 : 4 + 1 + 4 + 1 + 2], "big", signed=True)


def list_transactions(c: WireClient) -> list[str]:
    m = Msg(ApiKeys.LIST_TRANSACTIONS, 1)
    r = c.request(ApiKeys.LIST_TRANSACTIONS, 1, m(state_filters=(), producer_id_filters=(), duration_filter=-1))
    return sorted(x.transactional_id for x in r.transaction_states)


def group_requests(c: WireClient, g: str, t: str) -> dict:
    """The group and offset requests of ``g`` on topic ``t`` (and ``t``-missing)."""
    missing = f"{t}-missing"
    return {
        "find_group": find_coordinator(c, 0, g),
        "find_group_v3": find_coordinator(c, 0, g, version=3),
        "join": join_group(c, g),
        "sync": sync_group(c, g),
        "heartbeat": heartbeat(c, g),
        "leave": leave_group(c, g),
        "commit": offset_commit(c, g, [t, missing]),
        "fetch": offset_fetch(c, g, [t, missing]),
        "fetch_all": offset_fetch(c, g, None),
        "offset_delete": offset_delete(c, g, t),
        "describe": describe_groups(c, g),
        "listed": [x for x in list_groups(c) if x == g],
        "cg_heartbeat": consumer_group_heartbeat(c, f"{g}-848", [t]),
    }


def txn_requests(c: WireClient, x: str, g: str, t: str) -> dict:
    """The transaction requests of transactional id ``x`` (and group ``g``) on topic ``t``."""
    return {
        "find_txn": find_coordinator(c, 1, x),
        "init_txn": init_producer_id(c, x),
        "init_idempotent": init_producer_id(c, None),
        "add_partitions": add_partitions_to_txn(c, x, [t]),
        "add_offsets": add_offsets_to_txn(c, x, g),
        "txn_commit": txn_offset_commit(c, x, g, [t]),
        "end_txn": end_txn(c, x),
        "describe_txn": describe_transactions(c, x),
        "listed_txn": [y for y in list_transactions(c) if y == x],
    }


def list_offsets(c: WireClient, topic: str) -> list[int]:
    m = Msg(ApiKeys.LIST_OFFSETS, 7)
    req = m(
        replica_id=-1,
        isolation_level=0,
        topics=(
            m(
                "ListOffsetsTopic",
                name=topic,
                partitions=(m("ListOffsetsPartition", partition_index=0, current_leader_epoch=-1, timestamp=-1),),
            ),
        ),
    )
    return [int(p.error_code) for t in c.request(ApiKeys.LIST_OFFSETS, 7, req).topics for p in t.partitions]


def offset_for_leader_epoch(c: WireClient, topic: str) -> list[int]:
    m = Msg(ApiKeys.OFFSET_FOR_LEADER_EPOCH, 4)
    req = m(
        replica_id=-1,
        topics=(
            m(
                "OffsetForLeaderTopic",
                topic=topic,
                partitions=(m("OffsetForLeaderPartition", partition=0, current_leader_epoch=-1, leader_epoch=0),),
            ),
        ),
    )
    r = c.request(ApiKeys.OFFSET_FOR_LEADER_EPOCH, 4, req)
    return [int(p.error_code) for t in r.topics for p in t.partitions]


def delete_records(c: WireClient, topic: str) -> list[int]:
    m = Msg(ApiKeys.DELETE_RECORDS, 2)
    req = m(
        topics=(
            m("DeleteRecordsTopic", name=topic, partitions=(m("DeleteRecordsPartition", partition_index=0, offset=0),)),
        ),
        timeout=10000,
    )
    return [int(p.error_code) for t in c.request(ApiKeys.DELETE_RECORDS, 2, req).topics for p in t.partitions]


def describe_log_dirs(c: WireClient, topic: str) -> int:
    m = Msg(ApiKeys.DESCRIBE_LOG_DIRS, 4)
    req = m(topics=(m("DescribableLogDirTopic", topic=topic, partitions=(0,)),))
    return int(c.request(ApiKeys.DESCRIBE_LOG_DIRS, 4, req).error_code)


def alter_replica_log_dirs(c: WireClient, topic: str) -> list[int]:
    m = Msg(ApiKeys.ALTER_REPLICA_LOG_DIRS, 2)
    req = m(
        dirs=(
            m(
                "AlterReplicaLogDir",
                path="/nonexistent-dir",
                topics=(m("AlterReplicaLogDirTopic", name=topic, partitions=(0,)),),
            ),
        )
    )
    r = c.request(ApiKeys.ALTER_REPLICA_LOG_DIRS, 2, req)
    return [int(p.error_code) for t in r.results for p in t.partitions]


def elect_leaders(c: WireClient, topic: str) -> tuple:
    m = Msg(ApiKeys.ELECT_LEADERS, 2)
    req = m(election_type=0, topic_partitions=(m("TopicPartitions", topic=topic, partitions=(0,)),), timeout=10000)
    r = c.request(ApiKeys.ELECT_LEADERS, 2, req)
    return int(r.error_code), [int(p.error_code) for t in r.replica_election_results for p in t.partition_result]


def alter_partition_reassignments(c: WireClient, topic: str) -> tuple:
    """A cancellation (replicas null) of a reassignment that is not there."""
    m = Msg(ApiKeys.ALTER_PARTITION_REASSIGNMENTS, 0)
    req = m(
        timeout=10000,
        topics=(
            m(
                "ReassignableTopic",
                name=topic,
                partitions=(m("ReassignablePartition", partition_index=0, replicas=None),),
            ),
        ),
    )
    r = c.request(ApiKeys.ALTER_PARTITION_REASSIGNMENTS, 0, req)
    return int(r.error_code), [int(p.error_code) for t in r.responses for p in t.partitions]


def list_partition_reassignments(c: WireClient) -> int:
    m = Msg(ApiKeys.LIST_PARTITION_REASSIGNMENTS, 0)
    return int(c.request(ApiKeys.LIST_PARTITION_REASSIGNMENTS, 0, m(timeout=10000, topics=None)).error_code)


def describe_producers(c: WireClient, topic: str) -> list[int]:
    m = Msg(ApiKeys.DESCRIBE_PRODUCERS, 0)
    r = c.request(ApiKeys.DESCRIBE_PRODUCERS, 0, m(topics=(m("TopicRequest", name=topic, partition_indexes=(0,)),)))
    return [int(p.error_code) for t in r.topics for p in t.partitions]


def admin_requests(c: WireClient, t: str) -> dict:
    """The remaining APIs Kafka authorizes, on topic ``t``."""
    return {
        "list_offsets": list_offsets(c, t),
        "offset_for_leader_epoch": offset_for_leader_epoch(c, t),
        "delete_records": delete_records(c, t),
        "describe_log_dirs": describe_log_dirs(c, t),
        "alter_replica_log_dirs": alter_replica_log_dirs(c, t),
        "elect_leaders": elect_leaders(c, t),
        "alter_reassignments": alter_partition_reassignments(c, t),
        "list_reassignments": list_partition_reassignments(c),
        "describe_producers": describe_producers(c, t),
    }


# ---------------------------------------------------------------------------- KIP-848 and share groups


def consumer_group_join(c: WireClient, g: str, topic: str) -> None:
    """A member of ``g`` subscribing to ``topic`` (the admin's), heartbeating until assigned."""
    assert consumer_group_member(c, g, [topic], None, {}, 30) == ["?"]


def consumer_group_describe(c: WireClient, g: str) -> tuple:
    """(error, message, the topics its members are assigned)."""
    m = Msg(ApiKeys.CONSUMER_GROUP_DESCRIBE, 1)
    d = c.request(ApiKeys.CONSUMER_GROUP_DESCRIBE, 1, m(group_ids=(g,), include_authorized_operations=False)).groups[0]
    topics = sorted({tp.topic_name for x in d.members for tp in x.assignment.topic_partitions})
    return int(d.error_code), d.error_message, topics


def share_group_join(c: WireClient, g: str, topic: str):
    """A member of share group ``g`` subscribing to ``topic``, heartbeating until assigned: the
    topic id."""
    m = Msg(ApiKeys.SHARE_GROUP_HEARTBEAT, 1)
    member, epoch = uuid.uuid4().hex[:22], 0
    deadline = time.monotonic() + 30
    while True:
        r = c.request(
            ApiKeys.SHARE_GROUP_HEARTBEAT,
            1,
            m(group_id=g, member_id=member, member_epoch=epoch, rack_id=None, subscribed_topic_names=(topic,)),
        )
        assert r.error_code == 0, r
        if r.assignment is not None and r.assignment.topic_partitions:
            return r.assignment.topic_partitions[0].topic_id
        assert time.monotonic() < deadline, r
        epoch = r.member_epoch
        time.sleep(0.1)


def share_group_describe(c: WireClient, g: str) -> tuple:
    m = Msg(ApiKeys.SHARE_GROUP_DESCRIBE, 1)
    d = c.request(ApiKeys.SHARE_GROUP_DESCRIBE, 1, m(group_ids=(g,), include_authorized_operations=False)).groups[0]
    topics = sorted({tp.topic_name for x in d.members for tp in x.assignment.topic_partitions})
    return int(d.error_code), d.error_message, topics


def share_group_heartbeat(c: WireClient, g: str, topic: str) -> int:
    m = Msg(ApiKeys.SHARE_GROUP_HEARTBEAT, 1)
    req = m(group_id=g, member_id=uuid.uuid4().hex[:22], member_epoch=0, rack_id=None, subscribed_topic_names=(topic,))
    r = c.request(ApiKeys.SHARE_GROUP_HEARTBEAT, 1, req)
    return int(r.error_code), (r.member_epoch if r.error_code else None)


def share_fetch(c: WireClient, g: str, member: str, tid, epoch: int = 0) -> tuple:
    """(top-level error, per partition its authorization errors (error, acknowledge error), other
    codes as 0, a partition with neither left out); at epoch 1 it acknowledges offset 0 (accept)
    too. Past the authorization, Kafka's answers depend on whether the share partition has
    finished initializing: a partition without records on a session's first fetch is answered
    or not, an acknowledgement of a record not acquired is INVALID_RECORD_STATE or nothing."""
    m = Msg(ApiKeys.SHARE_FETCH, 1)
    acks = () if epoch == 0 else (m("AcknowledgementBatch", first_offset=0, last_offset=0, acknowledge_types=(1,)),)
    part = m("FetchPartition", partition_index=0, acknowledgement_batches=acks)
    req = m(
        group_id=g,
        member_id=member,
        share_session_epoch=epoch,
        max_wait=0,
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=10,
        batch_size=10,
        topics=(m("FetchTopic", topic_id=tid, partitions=(part,)),),
        forgotten_topics_data=(),
    )
    r = c.request(ApiKeys.SHARE_FETCH, 1, req)
    parts = [(_authz(p.error_code), _authz(p.acknowledge_error_code)) for t in r.responses for p in t.partitions]
    return int(r.error_code), [x for x in parts if x != (0, 0)]


def _authz(code) -> int:
    """``code`` if an authorization error, else 0."""
    return int(code) if int(code) in (29, 30, 31, 53) else 0


def share_acknowledge(c: WireClient, g: str, member: str, tid, epoch: int) -> tuple:
    m = Msg(ApiKeys.SHARE_ACKNOWLEDGE, 1)
    batch = m("AcknowledgementBatch", first_offset=0, last_offset=0, acknowledge_types=(1,))
    part = m("AcknowledgePartition", partition_index=0, acknowledgement_batches=(batch,))
    req = m(
        group_id=g,
        member_id=member,
        share_session_epoch=epoch,
        topics=(m("AcknowledgeTopic", topic_id=tid, partitions=(part,)),),
    )
    r = c.request(ApiKeys.SHARE_ACKNOWLEDGE, 1, req)  # (its codes as share_fetch's)
    return int(r.error_code), [_authz(p.error_code) for t in r.responses for p in t.partitions]


def describe_share_group_offsets(c: WireClient, g: str, topic: str | None) -> tuple:
    """(group error, {topic: [(partition error, message)]}) for ``topic`` (None: all)."""
    m = Msg(ApiKeys.DESCRIBE_SHARE_GROUP_OFFSETS, 1)
    topics = None
    if topic is not None:
        topics = (m("DescribeShareGroupOffsetsRequestTopic", topic_name=topic, partitions=(0,)),)
    body = m(groups=(m("DescribeShareGroupOffsetsRequestGroup", group_id=g, topics=topics),))
    d = c.request(ApiKeys.DESCRIBE_SHARE_GROUP_OFFSETS, 1, body).groups[0]
    return int(d.error_code), {
        t.topic_name: [(int(p.error_code), p.error_message) for p in t.partitions] for t in d.topics
    }


def alter_share_group_offsets(c: WireClient, g: str, topic: str) -> tuple:
    m = Msg(ApiKeys.ALTER_SHARE_GROUP_OFFSETS, 0)
    part = m("AlterShareGroupOffsetsRequestPartition", partition_index=0, start_offset=0)
    body = m(group_id=g, topics=(m("AlterShareGroupOffsetsRequestTopic", topic_name=topic, partitions=(part,)),))
    r = c.request(ApiKeys.ALTER_SHARE_GROUP_OFFSETS, 0, body)
    parts = [(int(p.error_code), p.error_message) for t in r.responses for p in t.partitions]
    return int(r.error_code), r.error_message, parts


def delete_share_group_offsets(c: WireClient, g: str, topic: str) -> tuple:
    m = Msg(ApiKeys.DELETE_SHARE_GROUP_OFFSETS, 0)
    body = m(group_id=g, topics=(m("DeleteShareGroupOffsetsRequestTopic", topic_name=topic),))
    r = c.request(ApiKeys.DELETE_SHARE_GROUP_OFFSETS, 0, body)
    return int(r.error_code), r.error_message, [(int(t.error_code), t.error_message) for t in r.responses]


def share_requests(c: WireClient, s: str, tid, g: str) -> dict:
    """The KIP-848 describe and share-group requests of a client on ``{s}-848`` and ``{s}-sh``
    (an admin's member of each is assigned topic ``s``, whose id is ``tid``) and ``{g}-alt``
    (an empty share group)."""
    member = uuid.uuid4().hex[:22]
    return {
        "cg_describe": consumer_group_describe(c, f"{s}-848"),
        "sg_describe": share_group_describe(c, f"{s}-sh"),
        "sg_heartbeat": share_group_heartbeat(c, f"{s}-sh", s),
        "share_fetch": share_fetch(c, f"{s}-sh", member, tid),
        "share_fetch_ack": share_fetch(c, f"{s}-sh", member, tid, epoch=1),
        "share_ack": share_acknowledge(c, f"{s}-sh", member, tid, epoch=2),
        "sg_offsets": describe_share_group_offsets(c, f"{s}-sh", s),
        "sg_offsets_all": describe_share_group_offsets(c, f"{s}-sh", None),
        "sg_alter": alter_share_group_offsets(c, f"{g}-alt", s),
        "sg_delete": delete_share_group_offsets(c, f"{g}-alt", s),
    }


def regex_heartbeat(c: WireClient, g: str, regex: str, names: dict):
    """A member of ``g`` subscribing to ``regex`` (Kafka resolves a regex after the heartbeat)."""
    return consumer_group_member(c, g, None, regex, names, 10)


def consumer_group_member(c: WireClient, g: str, topics, regex, names: dict, timeout: float):
    """ConsumerGroupHeartbeat v1 with ``topics`` or ``regex`` until the member is assigned
    something (at most ``timeout`` s): the error, or the names of the topics assigned
    (``names``: {topic id: name}, "?" for another), [] when nothing came in time."""
    m = Msg(ApiKeys.CONSUMER_GROUP_HEARTBEAT, 1)
    member, epoch = uuid.uuid4().hex[:22], 0
    deadline = time.monotonic() + timeout
    while True:
        r = c.request(
            ApiKeys.CONSUMER_GROUP_HEARTBEAT,
            1,
            m(
                group_id=g,
                member_id=member,
                member_epoch=epoch,
                instance_id=None,
                rack_id=None,
                rebalance_timeout=10000,
                subscribed_topic_names=None if topics is None else tuple(topics),
                subscribed_topic_regex=regex,
                server_assignor=None,
                topic_partitions=(),
            ),
        )
        if r.error_code:
            return int(r.error_code)
        if r.assignment is not None and r.assignment.topic_partitions:
            return sorted(names.get(tp.topic_id, "?") for tp in r.assignment.topic_partitions)
        if time.monotonic() > deadline:
            return []
        epoch = r.member_epoch
        time.sleep(0.1)
