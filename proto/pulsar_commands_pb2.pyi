from pulsarctl_py.proto import pulsar_api_pb2 as _pulsar_api_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ServerError(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UnknownError: _ClassVar[ServerError]
    MetadataError: _ClassVar[ServerError]
    PersistenceError: _ClassVar[ServerError]
    AuthenticationError: _ClassVar[ServerError]
    AuthorizationError: _ClassVar[ServerError]
    ConsumerBusy: _ClassVar[ServerError]
    ServiceNotReady: _ClassVar[ServerError]
    ProducerBlockedQuotaExceededError: _ClassVar[ServerError]
    ProducerBlockedQuotaExceededException: _ClassVar[ServerError]
    ChecksumError: _ClassVar[ServerError]
    UnsupportedVersionError: _ClassVar[ServerError]
    TopicNotFound: _ClassVar[ServerError]
    SubscriptionNotFound: _ClassVar[ServerError]
    ConsumerNotFound: _ClassVar[ServerError]
    TooManyRequests: _ClassVar[ServerError]
    TopicTerminatedError: _ClassVar[ServerError]
    ProducerBusy: _ClassVar[ServerError]
    InvalidTopicName: _ClassVar[ServerError]
    IncompatibleSchema: _ClassVar[ServerError]
    ConsumerAssignError: _ClassVar[ServerError]
    TransactionCoordinatorNotFound: _ClassVar[ServerError]
    InvalidTxnStatus: _ClassVar[ServerError]
    NotAllowedError: _ClassVar[ServerError]
    TransactionConflict: _ClassVar[ServerError]
    TransactionNotFound: _ClassVar[ServerError]
    ProducerFenced: _ClassVar[ServerError]

class AuthMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AuthMethodNone: _ClassVar[AuthMethod]
    AuthMethodYcaV1: _ClassVar[AuthMethod]
    AuthMethodAthens: _ClassVar[AuthMethod]

class ProducerAccessMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    Shared: _ClassVar[ProducerAccessMode]
    Exclusive: _ClassVar[ProducerAccessMode]
    WaitForExclusive: _ClassVar[ProducerAccessMode]
    ExclusiveWithFencing: _ClassVar[ProducerAccessMode]
UnknownError: ServerError
MetadataError: ServerError
PersistenceError: ServerError
AuthenticationError: ServerError
AuthorizationError: ServerError
ConsumerBusy: ServerError
ServiceNotReady: ServerError
ProducerBlockedQuotaExceededError: ServerError
ProducerBlockedQuotaExceededException: ServerError
ChecksumError: ServerError
UnsupportedVersionError: ServerError
TopicNotFound: ServerError
SubscriptionNotFound: ServerError
ConsumerNotFound: ServerError
TooManyRequests: ServerError
TopicTerminatedError: ServerError
ProducerBusy: ServerError
InvalidTopicName: ServerError
IncompatibleSchema: ServerError
ConsumerAssignError: ServerError
TransactionCoordinatorNotFound: ServerError
InvalidTxnStatus: ServerError
NotAllowedError: ServerError
TransactionConflict: ServerError
TransactionNotFound: ServerError
ProducerFenced: ServerError
AuthMethodNone: AuthMethod
AuthMethodYcaV1: AuthMethod
AuthMethodAthens: AuthMethod
Shared: ProducerAccessMode
Exclusive: ProducerAccessMode
WaitForExclusive: ProducerAccessMode
ExclusiveWithFencing: ProducerAccessMode

class FeatureFlags(_message.Message):
    __slots__ = ("supports_auth_refresh", "supports_broker_entry_metadata", "supports_partial_producer", "supports_topic_watchers", "supports_get_partitioned_metadata_without_auto_creation")
    SUPPORTS_AUTH_REFRESH_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_BROKER_ENTRY_METADATA_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_PARTIAL_PRODUCER_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_TOPIC_WATCHERS_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_GET_PARTITIONED_METADATA_WITHOUT_AUTO_CREATION_FIELD_NUMBER: _ClassVar[int]
    supports_auth_refresh: bool
    supports_broker_entry_metadata: bool
    supports_partial_producer: bool
    supports_topic_watchers: bool
    supports_get_partitioned_metadata_without_auto_creation: bool
    def __init__(self, supports_auth_refresh: _Optional[bool] = ..., supports_broker_entry_metadata: _Optional[bool] = ..., supports_partial_producer: _Optional[bool] = ..., supports_topic_watchers: _Optional[bool] = ..., supports_get_partitioned_metadata_without_auto_creation: _Optional[bool] = ...) -> None: ...

class CommandConnect(_message.Message):
    __slots__ = ("client_version", "auth_method", "auth_data", "protocol_version", "auth_method_name", "proxy_to_broker_url", "original_principal", "original_auth_data", "original_auth_method", "feature_flags")
    CLIENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    AUTH_METHOD_FIELD_NUMBER: _ClassVar[int]
    AUTH_DATA_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    AUTH_METHOD_NAME_FIELD_NUMBER: _ClassVar[int]
    PROXY_TO_BROKER_URL_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_AUTH_DATA_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_AUTH_METHOD_FIELD_NUMBER: _ClassVar[int]
    FEATURE_FLAGS_FIELD_NUMBER: _ClassVar[int]
    client_version: str
    auth_method: AuthMethod
    auth_data: bytes
    protocol_version: int
    auth_method_name: str
    proxy_to_broker_url: str
    original_principal: str
    original_auth_data: str
    original_auth_method: str
    feature_flags: FeatureFlags
    def __init__(self, client_version: _Optional[str] = ..., auth_method: _Optional[_Union[AuthMethod, str]] = ..., auth_data: _Optional[bytes] = ..., protocol_version: _Optional[int] = ..., auth_method_name: _Optional[str] = ..., proxy_to_broker_url: _Optional[str] = ..., original_principal: _Optional[str] = ..., original_auth_data: _Optional[str] = ..., original_auth_method: _Optional[str] = ..., feature_flags: _Optional[_Union[FeatureFlags, _Mapping]] = ...) -> None: ...

class CommandConnected(_message.Message):
    __slots__ = ("server_version", "protocol_version", "max_message_size", "feature_flags")
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    FEATURE_FLAGS_FIELD_NUMBER: _ClassVar[int]
    server_version: str
    protocol_version: int
    max_message_size: int
    feature_flags: FeatureFlags
    def __init__(self, server_version: _Optional[str] = ..., protocol_version: _Optional[int] = ..., max_message_size: _Optional[int] = ..., feature_flags: _Optional[_Union[FeatureFlags, _Mapping]] = ...) -> None: ...

class CommandPartitionedTopicMetadata(_message.Message):
    __slots__ = ("topic", "request_id", "original_principal", "original_auth_data", "original_auth_method", "metadata_auto_creation_enabled")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_AUTH_DATA_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_AUTH_METHOD_FIELD_NUMBER: _ClassVar[int]
    METADATA_AUTO_CREATION_ENABLED_FIELD_NUMBER: _ClassVar[int]
    topic: str
    request_id: int
    original_principal: str
    original_auth_data: str
    original_auth_method: str
    metadata_auto_creation_enabled: bool
    def __init__(self, topic: _Optional[str] = ..., request_id: _Optional[int] = ..., original_principal: _Optional[str] = ..., original_auth_data: _Optional[str] = ..., original_auth_method: _Optional[str] = ..., metadata_auto_creation_enabled: _Optional[bool] = ...) -> None: ...

class CommandPartitionedTopicMetadataResponse(_message.Message):
    __slots__ = ("partitions", "request_id", "response", "error", "message")
    class LookupType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        Success: _ClassVar[CommandPartitionedTopicMetadataResponse.LookupType]
        Failed: _ClassVar[CommandPartitionedTopicMetadataResponse.LookupType]
    Success: CommandPartitionedTopicMetadataResponse.LookupType
    Failed: CommandPartitionedTopicMetadataResponse.LookupType
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    partitions: int
    request_id: int
    response: CommandPartitionedTopicMetadataResponse.LookupType
    error: ServerError
    message: str
    def __init__(self, partitions: _Optional[int] = ..., request_id: _Optional[int] = ..., response: _Optional[_Union[CommandPartitionedTopicMetadataResponse.LookupType, str]] = ..., error: _Optional[_Union[ServerError, str]] = ..., message: _Optional[str] = ...) -> None: ...

class CommandLookupTopic(_message.Message):
    __slots__ = ("topic", "request_id", "authoritative", "original_principal", "original_auth_data", "original_auth_method", "advertised_listener_name")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    AUTHORITATIVE_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_AUTH_DATA_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_AUTH_METHOD_FIELD_NUMBER: _ClassVar[int]
    ADVERTISED_LISTENER_NAME_FIELD_NUMBER: _ClassVar[int]
    topic: str
    request_id: int
    authoritative: bool
    original_principal: str
    original_auth_data: str
    original_auth_method: str
    advertised_listener_name: str
    def __init__(self, topic: _Optional[str] = ..., request_id: _Optional[int] = ..., authoritative: _Optional[bool] = ..., original_principal: _Optional[str] = ..., original_auth_data: _Optional[str] = ..., original_auth_method: _Optional[str] = ..., advertised_listener_name: _Optional[str] = ...) -> None: ...

class CommandLookupTopicResponse(_message.Message):
    __slots__ = ("brokerServiceUrl", "brokerServiceUrlTls", "response", "request_id", "authoritative", "error", "message", "proxy_through_service_url")
    class LookupType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        Redirect: _ClassVar[CommandLookupTopicResponse.LookupType]
        Connect: _ClassVar[CommandLookupTopicResponse.LookupType]
        Failed: _ClassVar[CommandLookupTopicResponse.LookupType]
    Redirect: CommandLookupTopicResponse.LookupType
    Connect: CommandLookupTopicResponse.LookupType
    Failed: CommandLookupTopicResponse.LookupType
    BROKERSERVICEURL_FIELD_NUMBER: _ClassVar[int]
    BROKERSERVICEURLTLS_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    AUTHORITATIVE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PROXY_THROUGH_SERVICE_URL_FIELD_NUMBER: _ClassVar[int]
    brokerServiceUrl: str
    brokerServiceUrlTls: str
    response: CommandLookupTopicResponse.LookupType
    request_id: int
    authoritative: bool
    error: ServerError
    message: str
    proxy_through_service_url: bool
    def __init__(self, brokerServiceUrl: _Optional[str] = ..., brokerServiceUrlTls: _Optional[str] = ..., response: _Optional[_Union[CommandLookupTopicResponse.LookupType, str]] = ..., request_id: _Optional[int] = ..., authoritative: _Optional[bool] = ..., error: _Optional[_Union[ServerError, str]] = ..., message: _Optional[str] = ..., proxy_through_service_url: _Optional[bool] = ...) -> None: ...

class CommandProducer(_message.Message):
    __slots__ = ("topic", "producer_id", "request_id", "producer_name", "encrypted", "metadata", "epoch", "user_provided_producer_name", "producer_access_mode", "topic_epoch", "txn_enabled", "initial_subscription_name")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_NAME_FIELD_NUMBER: _ClassVar[int]
    ENCRYPTED_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    USER_PROVIDED_PRODUCER_NAME_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ACCESS_MODE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TXN_ENABLED_FIELD_NUMBER: _ClassVar[int]
    INITIAL_SUBSCRIPTION_NAME_FIELD_NUMBER: _ClassVar[int]
    topic: str
    producer_id: int
    request_id: int
    producer_name: str
    encrypted: bool
    metadata: _containers.RepeatedCompositeFieldContainer[_pulsar_api_pb2.KeyValue]
    epoch: int
    user_provided_producer_name: bool
    producer_access_mode: ProducerAccessMode
    topic_epoch: int
    txn_enabled: bool
    initial_subscription_name: str
    def __init__(self, topic: _Optional[str] = ..., producer_id: _Optional[int] = ..., request_id: _Optional[int] = ..., producer_name: _Optional[str] = ..., encrypted: _Optional[bool] = ..., metadata: _Optional[_Iterable[_Union[_pulsar_api_pb2.KeyValue, _Mapping]]] = ..., epoch: _Optional[int] = ..., user_provided_producer_name: _Optional[bool] = ..., producer_access_mode: _Optional[_Union[ProducerAccessMode, str]] = ..., topic_epoch: _Optional[int] = ..., txn_enabled: _Optional[bool] = ..., initial_subscription_name: _Optional[str] = ...) -> None: ...

class CommandProducerSuccess(_message.Message):
    __slots__ = ("request_id", "producer_name", "last_sequence_id", "schema_version", "topic_epoch", "producer_ready")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_NAME_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    TOPIC_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_READY_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    producer_name: str
    last_sequence_id: int
    schema_version: bytes
    topic_epoch: int
    producer_ready: bool
    def __init__(self, request_id: _Optional[int] = ..., producer_name: _Optional[str] = ..., last_sequence_id: _Optional[int] = ..., schema_version: _Optional[bytes] = ..., topic_epoch: _Optional[int] = ..., producer_ready: _Optional[bool] = ...) -> None: ...

class CommandSend(_message.Message):
    __slots__ = ("producer_id", "sequence_id", "num_messages", "txnid_least_bits", "txnid_most_bits", "highest_sequence_id", "is_chunk", "marker", "message_id")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TXNID_LEAST_BITS_FIELD_NUMBER: _ClassVar[int]
    TXNID_MOST_BITS_FIELD_NUMBER: _ClassVar[int]
    HIGHEST_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    IS_CHUNK_FIELD_NUMBER: _ClassVar[int]
    MARKER_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    sequence_id: int
    num_messages: int
    txnid_least_bits: int
    txnid_most_bits: int
    highest_sequence_id: int
    is_chunk: bool
    marker: bool
    message_id: _pulsar_api_pb2.MessageIdData
    def __init__(self, producer_id: _Optional[int] = ..., sequence_id: _Optional[int] = ..., num_messages: _Optional[int] = ..., txnid_least_bits: _Optional[int] = ..., txnid_most_bits: _Optional[int] = ..., highest_sequence_id: _Optional[int] = ..., is_chunk: _Optional[bool] = ..., marker: _Optional[bool] = ..., message_id: _Optional[_Union[_pulsar_api_pb2.MessageIdData, _Mapping]] = ...) -> None: ...

class CommandSendReceipt(_message.Message):
    __slots__ = ("producer_id", "sequence_id", "message_id", "highest_sequence_id")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    HIGHEST_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    sequence_id: int
    message_id: _pulsar_api_pb2.MessageIdData
    highest_sequence_id: int
    def __init__(self, producer_id: _Optional[int] = ..., sequence_id: _Optional[int] = ..., message_id: _Optional[_Union[_pulsar_api_pb2.MessageIdData, _Mapping]] = ..., highest_sequence_id: _Optional[int] = ...) -> None: ...

class CommandSendError(_message.Message):
    __slots__ = ("producer_id", "sequence_id", "error", "message")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    sequence_id: int
    error: ServerError
    message: str
    def __init__(self, producer_id: _Optional[int] = ..., sequence_id: _Optional[int] = ..., error: _Optional[_Union[ServerError, str]] = ..., message: _Optional[str] = ...) -> None: ...

class CommandCloseProducer(_message.Message):
    __slots__ = ("producer_id", "request_id", "assignedBrokerServiceUrl", "assignedBrokerServiceUrlTls")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNEDBROKERSERVICEURL_FIELD_NUMBER: _ClassVar[int]
    ASSIGNEDBROKERSERVICEURLTLS_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    request_id: int
    assignedBrokerServiceUrl: str
    assignedBrokerServiceUrlTls: str
    def __init__(self, producer_id: _Optional[int] = ..., request_id: _Optional[int] = ..., assignedBrokerServiceUrl: _Optional[str] = ..., assignedBrokerServiceUrlTls: _Optional[str] = ...) -> None: ...

class CommandSuccess(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    def __init__(self, request_id: _Optional[int] = ...) -> None: ...

class CommandError(_message.Message):
    __slots__ = ("request_id", "error", "message")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    error: ServerError
    message: str
    def __init__(self, request_id: _Optional[int] = ..., error: _Optional[_Union[ServerError, str]] = ..., message: _Optional[str] = ...) -> None: ...

class CommandPing(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CommandPong(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CommandSubscribe(_message.Message):
    __slots__ = ("topic", "subscription", "subType", "consumer_id", "request_id", "consumer_name", "priority_level", "durable", "start_message_id", "metadata", "read_compacted", "initialPosition", "replicate_subscription_state", "force_topic_creation", "start_message_rollback_duration_sec", "subscription_properties", "consumer_epoch")
    class SubType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        Exclusive: _ClassVar[CommandSubscribe.SubType]
        Shared: _ClassVar[CommandSubscribe.SubType]
        Failover: _ClassVar[CommandSubscribe.SubType]
        Key_Shared: _ClassVar[CommandSubscribe.SubType]
    Exclusive: CommandSubscribe.SubType
    Shared: CommandSubscribe.SubType
    Failover: CommandSubscribe.SubType
    Key_Shared: CommandSubscribe.SubType
    class InitialPosition(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        Latest: _ClassVar[CommandSubscribe.InitialPosition]
        Earliest: _ClassVar[CommandSubscribe.InitialPosition]
    Latest: CommandSubscribe.InitialPosition
    Earliest: CommandSubscribe.InitialPosition
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SUBTYPE_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_NAME_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    START_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    READ_COMPACTED_FIELD_NUMBER: _ClassVar[int]
    INITIALPOSITION_FIELD_NUMBER: _ClassVar[int]
    REPLICATE_SUBSCRIPTION_STATE_FIELD_NUMBER: _ClassVar[int]
    FORCE_TOPIC_CREATION_FIELD_NUMBER: _ClassVar[int]
    START_MESSAGE_ROLLBACK_DURATION_SEC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscription: str
    subType: CommandSubscribe.SubType
    consumer_id: int
    request_id: int
    consumer_name: str
    priority_level: int
    durable: bool
    start_message_id: _pulsar_api_pb2.MessageIdData
    metadata: _containers.RepeatedCompositeFieldContainer[_pulsar_api_pb2.KeyValue]
    read_compacted: bool
    initialPosition: CommandSubscribe.InitialPosition
    replicate_subscription_state: bool
    force_topic_creation: bool
    start_message_rollback_duration_sec: int
    subscription_properties: _containers.RepeatedCompositeFieldContainer[_pulsar_api_pb2.KeyValue]
    consumer_epoch: int
    def __init__(self, topic: _Optional[str] = ..., subscription: _Optional[str] = ..., subType: _Optional[_Union[CommandSubscribe.SubType, str]] = ..., consumer_id: _Optional[int] = ..., request_id: _Optional[int] = ..., consumer_name: _Optional[str] = ..., priority_level: _Optional[int] = ..., durable: _Optional[bool] = ..., start_message_id: _Optional[_Union[_pulsar_api_pb2.MessageIdData, _Mapping]] = ..., metadata: _Optional[_Iterable[_Union[_pulsar_api_pb2.KeyValue, _Mapping]]] = ..., read_compacted: _Optional[bool] = ..., initialPosition: _Optional[_Union[CommandSubscribe.InitialPosition, str]] = ..., replicate_subscription_state: _Optional[bool] = ..., force_topic_creation: _Optional[bool] = ..., start_message_rollback_duration_sec: _Optional[int] = ..., subscription_properties: _Optional[_Iterable[_Union[_pulsar_api_pb2.KeyValue, _Mapping]]] = ..., consumer_epoch: _Optional[int] = ...) -> None: ...

class CommandFlow(_message.Message):
    __slots__ = ("consumer_id", "messagePermits")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGEPERMITS_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    messagePermits: int
    def __init__(self, consumer_id: _Optional[int] = ..., messagePermits: _Optional[int] = ...) -> None: ...

class CommandMessage(_message.Message):
    __slots__ = ("consumer_id", "message_id", "redelivery_count", "ack_set", "consumer_epoch")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    REDELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    ACK_SET_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    message_id: _pulsar_api_pb2.MessageIdData
    redelivery_count: int
    ack_set: _containers.RepeatedScalarFieldContainer[int]
    consumer_epoch: int
    def __init__(self, consumer_id: _Optional[int] = ..., message_id: _Optional[_Union[_pulsar_api_pb2.MessageIdData, _Mapping]] = ..., redelivery_count: _Optional[int] = ..., ack_set: _Optional[_Iterable[int]] = ..., consumer_epoch: _Optional[int] = ...) -> None: ...

class CommandAck(_message.Message):
    __slots__ = ("consumer_id", "ack_type", "message_id", "validation_error", "properties", "txnid_least_bits", "txnid_most_bits", "request_id")
    class AckType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        Individual: _ClassVar[CommandAck.AckType]
        Cumulative: _ClassVar[CommandAck.AckType]
    Individual: CommandAck.AckType
    Cumulative: CommandAck.AckType
    class ValidationError(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UncompressedSizeCorruption: _ClassVar[CommandAck.ValidationError]
        DecompressionError: _ClassVar[CommandAck.ValidationError]
        ChecksumMismatch: _ClassVar[CommandAck.ValidationError]
        BatchDeSerializeError: _ClassVar[CommandAck.ValidationError]
        DecryptionError: _ClassVar[CommandAck.ValidationError]
    UncompressedSizeCorruption: CommandAck.ValidationError
    DecompressionError: CommandAck.ValidationError
    ChecksumMismatch: CommandAck.ValidationError
    BatchDeSerializeError: CommandAck.ValidationError
    DecryptionError: CommandAck.ValidationError
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    ACK_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_ERROR_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    TXNID_LEAST_BITS_FIELD_NUMBER: _ClassVar[int]
    TXNID_MOST_BITS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    ack_type: CommandAck.AckType
    message_id: _containers.RepeatedCompositeFieldContainer[_pulsar_api_pb2.MessageIdData]
    validation_error: CommandAck.ValidationError
    properties: _containers.RepeatedCompositeFieldContainer[_pulsar_api_pb2.KeyLongValue]
    txnid_least_bits: int
    txnid_most_bits: int
    request_id: int
    def __init__(self, consumer_id: _Optional[int] = ..., ack_type: _Optional[_Union[CommandAck.AckType, str]] = ..., message_id: _Optional[_Iterable[_Union[_pulsar_api_pb2.MessageIdData, _Mapping]]] = ..., validation_error: _Optional[_Union[CommandAck.ValidationError, str]] = ..., properties: _Optional[_Iterable[_Union[_pulsar_api_pb2.KeyLongValue, _Mapping]]] = ..., txnid_least_bits: _Optional[int] = ..., txnid_most_bits: _Optional[int] = ..., request_id: _Optional[int] = ...) -> None: ...

class CommandCloseConsumer(_message.Message):
    __slots__ = ("consumer_id", "request_id", "assignedBrokerServiceUrl", "assignedBrokerServiceUrlTls")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNEDBROKERSERVICEURL_FIELD_NUMBER: _ClassVar[int]
    ASSIGNEDBROKERSERVICEURLTLS_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    request_id: int
    assignedBrokerServiceUrl: str
    assignedBrokerServiceUrlTls: str
    def __init__(self, consumer_id: _Optional[int] = ..., request_id: _Optional[int] = ..., assignedBrokerServiceUrl: _Optional[str] = ..., assignedBrokerServiceUrlTls: _Optional[str] = ...) -> None: ...

class CommandGetLastMessageId(_message.Message):
    __slots__ = ("consumer_id", "request_id")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    request_id: int
    def __init__(self, consumer_id: _Optional[int] = ..., request_id: _Optional[int] = ...) -> None: ...

class CommandGetLastMessageIdResponse(_message.Message):
    __slots__ = ("last_message_id", "request_id", "consumer_mark_delete_position")
    LAST_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_MARK_DELETE_POSITION_FIELD_NUMBER: _ClassVar[int]
    last_message_id: _pulsar_api_pb2.MessageIdData
    request_id: int
    consumer_mark_delete_position: _pulsar_api_pb2.MessageIdData
    def __init__(self, last_message_id: _Optional[_Union[_pulsar_api_pb2.MessageIdData, _Mapping]] = ..., request_id: _Optional[int] = ..., consumer_mark_delete_position: _Optional[_Union[_pulsar_api_pb2.MessageIdData, _Mapping]] = ...) -> None: ...

class BaseCommand(_message.Message):
    __slots__ = ("type", "connect", "connected", "subscribe", "producer", "send", "send_receipt", "send_error", "message", "ack", "flow", "success", "error", "close_producer", "close_consumer", "producer_success", "ping", "pong", "partitionMetadata", "partitionMetadataResponse", "lookupTopic", "lookupTopicResponse", "getLastMessageId", "getLastMessageIdResponse")
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        CONNECT: _ClassVar[BaseCommand.Type]
        CONNECTED: _ClassVar[BaseCommand.Type]
        SUBSCRIBE: _ClassVar[BaseCommand.Type]
        PRODUCER: _ClassVar[BaseCommand.Type]
        SEND: _ClassVar[BaseCommand.Type]
        SEND_RECEIPT: _ClassVar[BaseCommand.Type]
        SEND_ERROR: _ClassVar[BaseCommand.Type]
        MESSAGE: _ClassVar[BaseCommand.Type]
        ACK: _ClassVar[BaseCommand.Type]
        FLOW: _ClassVar[BaseCommand.Type]
        UNSUBSCRIBE: _ClassVar[BaseCommand.Type]
        SUCCESS: _ClassVar[BaseCommand.Type]
        ERROR: _ClassVar[BaseCommand.Type]
        CLOSE_PRODUCER: _ClassVar[BaseCommand.Type]
        CLOSE_CONSUMER: _ClassVar[BaseCommand.Type]
        PRODUCER_SUCCESS: _ClassVar[BaseCommand.Type]
        PING: _ClassVar[BaseCommand.Type]
        PONG: _ClassVar[BaseCommand.Type]
        REDELIVER_UNACKNOWLEDGED_MESSAGES: _ClassVar[BaseCommand.Type]
        PARTITIONED_METADATA: _ClassVar[BaseCommand.Type]
        PARTITIONED_METADATA_RESPONSE: _ClassVar[BaseCommand.Type]
        LOOKUP: _ClassVar[BaseCommand.Type]
        LOOKUP_RESPONSE: _ClassVar[BaseCommand.Type]
        CONSUMER_STATS: _ClassVar[BaseCommand.Type]
        CONSUMER_STATS_RESPONSE: _ClassVar[BaseCommand.Type]
        REACHED_END_OF_TOPIC: _ClassVar[BaseCommand.Type]
        SEEK: _ClassVar[BaseCommand.Type]
        GET_LAST_MESSAGE_ID: _ClassVar[BaseCommand.Type]
        GET_LAST_MESSAGE_ID_RESPONSE: _ClassVar[BaseCommand.Type]
        ACTIVE_CONSUMER_CHANGE: _ClassVar[BaseCommand.Type]
        GET_TOPICS_OF_NAMESPACE: _ClassVar[BaseCommand.Type]
        GET_TOPICS_OF_NAMESPACE_RESPONSE: _ClassVar[BaseCommand.Type]
        GET_SCHEMA: _ClassVar[BaseCommand.Type]
        GET_SCHEMA_RESPONSE: _ClassVar[BaseCommand.Type]
        AUTH_CHALLENGE: _ClassVar[BaseCommand.Type]
        AUTH_RESPONSE: _ClassVar[BaseCommand.Type]
        ACK_RESPONSE: _ClassVar[BaseCommand.Type]
        GET_OR_CREATE_SCHEMA: _ClassVar[BaseCommand.Type]
        GET_OR_CREATE_SCHEMA_RESPONSE: _ClassVar[BaseCommand.Type]
        NEW_TXN: _ClassVar[BaseCommand.Type]
        NEW_TXN_RESPONSE: _ClassVar[BaseCommand.Type]
        ADD_PARTITION_TO_TXN: _ClassVar[BaseCommand.Type]
        ADD_PARTITION_TO_TXN_RESPONSE: _ClassVar[BaseCommand.Type]
        ADD_SUBSCRIPTION_TO_TXN: _ClassVar[BaseCommand.Type]
        ADD_SUBSCRIPTION_TO_TXN_RESPONSE: _ClassVar[BaseCommand.Type]
        END_TXN: _ClassVar[BaseCommand.Type]
        END_TXN_RESPONSE: _ClassVar[BaseCommand.Type]
        END_TXN_ON_PARTITION: _ClassVar[BaseCommand.Type]
        END_TXN_ON_PARTITION_RESPONSE: _ClassVar[BaseCommand.Type]
        END_TXN_ON_SUBSCRIPTION: _ClassVar[BaseCommand.Type]
        END_TXN_ON_SUBSCRIPTION_RESPONSE: _ClassVar[BaseCommand.Type]
        TC_CLIENT_CONNECT_REQUEST: _ClassVar[BaseCommand.Type]
        TC_CLIENT_CONNECT_RESPONSE: _ClassVar[BaseCommand.Type]
        WATCH_TOPIC_LIST: _ClassVar[BaseCommand.Type]
        WATCH_TOPIC_LIST_SUCCESS: _ClassVar[BaseCommand.Type]
        WATCH_TOPIC_UPDATE: _ClassVar[BaseCommand.Type]
        WATCH_TOPIC_LIST_CLOSE: _ClassVar[BaseCommand.Type]
        TOPIC_MIGRATED: _ClassVar[BaseCommand.Type]
    CONNECT: BaseCommand.Type
    CONNECTED: BaseCommand.Type
    SUBSCRIBE: BaseCommand.Type
    PRODUCER: BaseCommand.Type
    SEND: BaseCommand.Type
    SEND_RECEIPT: BaseCommand.Type
    SEND_ERROR: BaseCommand.Type
    MESSAGE: BaseCommand.Type
    ACK: BaseCommand.Type
    FLOW: BaseCommand.Type
    UNSUBSCRIBE: BaseCommand.Type
    SUCCESS: BaseCommand.Type
    ERROR: BaseCommand.Type
    CLOSE_PRODUCER: BaseCommand.Type
    CLOSE_CONSUMER: BaseCommand.Type
    PRODUCER_SUCCESS: BaseCommand.Type
    PING: BaseCommand.Type
    PONG: BaseCommand.Type
    REDELIVER_UNACKNOWLEDGED_MESSAGES: BaseCommand.Type
    PARTITIONED_METADATA: BaseCommand.Type
    PARTITIONED_METADATA_RESPONSE: BaseCommand.Type
    LOOKUP: BaseCommand.Type
    LOOKUP_RESPONSE: BaseCommand.Type
    CONSUMER_STATS: BaseCommand.Type
    CONSUMER_STATS_RESPONSE: BaseCommand.Type
    REACHED_END_OF_TOPIC: BaseCommand.Type
    SEEK: BaseCommand.Type
    GET_LAST_MESSAGE_ID: BaseCommand.Type
    GET_LAST_MESSAGE_ID_RESPONSE: BaseCommand.Type
    ACTIVE_CONSUMER_CHANGE: BaseCommand.Type
    GET_TOPICS_OF_NAMESPACE: BaseCommand.Type
    GET_TOPICS_OF_NAMESPACE_RESPONSE: BaseCommand.Type
    GET_SCHEMA: BaseCommand.Type
    GET_SCHEMA_RESPONSE: BaseCommand.Type
    AUTH_CHALLENGE: BaseCommand.Type
    AUTH_RESPONSE: BaseCommand.Type
    ACK_RESPONSE: BaseCommand.Type
    GET_OR_CREATE_SCHEMA: BaseCommand.Type
    GET_OR_CREATE_SCHEMA_RESPONSE: BaseCommand.Type
    NEW_TXN: BaseCommand.Type
    NEW_TXN_RESPONSE: BaseCommand.Type
    ADD_PARTITION_TO_TXN: BaseCommand.Type
    ADD_PARTITION_TO_TXN_RESPONSE: BaseCommand.Type
    ADD_SUBSCRIPTION_TO_TXN: BaseCommand.Type
    ADD_SUBSCRIPTION_TO_TXN_RESPONSE: BaseCommand.Type
    END_TXN: BaseCommand.Type
    END_TXN_RESPONSE: BaseCommand.Type
    END_TXN_ON_PARTITION: BaseCommand.Type
    END_TXN_ON_PARTITION_RESPONSE: BaseCommand.Type
    END_TXN_ON_SUBSCRIPTION: BaseCommand.Type
    END_TXN_ON_SUBSCRIPTION_RESPONSE: BaseCommand.Type
    TC_CLIENT_CONNECT_REQUEST: BaseCommand.Type
    TC_CLIENT_CONNECT_RESPONSE: BaseCommand.Type
    WATCH_TOPIC_LIST: BaseCommand.Type
    WATCH_TOPIC_LIST_SUCCESS: BaseCommand.Type
    WATCH_TOPIC_UPDATE: BaseCommand.Type
    WATCH_TOPIC_LIST_CLOSE: BaseCommand.Type
    TOPIC_MIGRATED: BaseCommand.Type
    TYPE_FIELD_NUMBER: _ClassVar[int]
    CONNECT_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    SEND_FIELD_NUMBER: _ClassVar[int]
    SEND_RECEIPT_FIELD_NUMBER: _ClassVar[int]
    SEND_ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    FLOW_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CLOSE_PRODUCER_FIELD_NUMBER: _ClassVar[int]
    CLOSE_CONSUMER_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_SUCCESS_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    PONG_FIELD_NUMBER: _ClassVar[int]
    PARTITIONMETADATA_FIELD_NUMBER: _ClassVar[int]
    PARTITIONMETADATARESPONSE_FIELD_NUMBER: _ClassVar[int]
    LOOKUPTOPIC_FIELD_NUMBER: _ClassVar[int]
    LOOKUPTOPICRESPONSE_FIELD_NUMBER: _ClassVar[int]
    GETLASTMESSAGEID_FIELD_NUMBER: _ClassVar[int]
    GETLASTMESSAGEIDRESPONSE_FIELD_NUMBER: _ClassVar[int]
    type: BaseCommand.Type
    connect: CommandConnect
    connected: CommandConnected
    subscribe: CommandSubscribe
    producer: CommandProducer
    send: CommandSend
    send_receipt: CommandSendReceipt
    send_error: CommandSendError
    message: CommandMessage
    ack: CommandAck
    flow: CommandFlow
    success: CommandSuccess
    error: CommandError
    close_producer: CommandCloseProducer
    close_consumer: CommandCloseConsumer
    producer_success: CommandProducerSuccess
    ping: CommandPing
    pong: CommandPong
    partitionMetadata: CommandPartitionedTopicMetadata
    partitionMetadataResponse: CommandPartitionedTopicMetadataResponse
    lookupTopic: CommandLookupTopic
    lookupTopicResponse: CommandLookupTopicResponse
    getLastMessageId: CommandGetLastMessageId
    getLastMessageIdResponse: CommandGetLastMessageIdResponse
    def __init__(self, type: _Optional[_Union[BaseCommand.Type, str]] = ..., connect: _Optional[_Union[CommandConnect, _Mapping]] = ..., connected: _Optional[_Union[CommandConnected, _Mapping]] = ..., subscribe: _Optional[_Union[CommandSubscribe, _Mapping]] = ..., producer: _Optional[_Union[CommandProducer, _Mapping]] = ..., send: _Optional[_Union[CommandSend, _Mapping]] = ..., send_receipt: _Optional[_Union[CommandSendReceipt, _Mapping]] = ..., send_error: _Optional[_Union[CommandSendError, _Mapping]] = ..., message: _Optional[_Union[CommandMessage, _Mapping]] = ..., ack: _Optional[_Union[CommandAck, _Mapping]] = ..., flow: _Optional[_Union[CommandFlow, _Mapping]] = ..., success: _Optional[_Union[CommandSuccess, _Mapping]] = ..., error: _Optional[_Union[CommandError, _Mapping]] = ..., close_producer: _Optional[_Union[CommandCloseProducer, _Mapping]] = ..., close_consumer: _Optional[_Union[CommandCloseConsumer, _Mapping]] = ..., producer_success: _Optional[_Union[CommandProducerSuccess, _Mapping]] = ..., ping: _Optional[_Union[CommandPing, _Mapping]] = ..., pong: _Optional[_Union[CommandPong, _Mapping]] = ..., partitionMetadata: _Optional[_Union[CommandPartitionedTopicMetadata, _Mapping]] = ..., partitionMetadataResponse: _Optional[_Union[CommandPartitionedTopicMetadataResponse, _Mapping]] = ..., lookupTopic: _Optional[_Union[CommandLookupTopic, _Mapping]] = ..., lookupTopicResponse: _Optional[_Union[CommandLookupTopicResponse, _Mapping]] = ..., getLastMessageId: _Optional[_Union[CommandGetLastMessageId, _Mapping]] = ..., getLastMessageIdResponse: _Optional[_Union[CommandGetLastMessageIdResponse, _Mapping]] = ...) -> None: ...
