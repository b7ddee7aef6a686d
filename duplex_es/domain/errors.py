"""Error codes a client can branch on.

Where OpenAI's Realtime API has a code for a situation, duplex_es uses it
(docs/sources.md, "The error event"); the rest are duplex_es codes named the same way.
Every refusal logs a ``command.rejected`` event carrying one of these codes (docs/architecture.md, I3).
"""

from __future__ import annotations

__all__ = ["Code", "ERROR_TYPES"]


class Code:
    """The error codes. Values are the strings sent in ``error.code``."""

    # Frames and envelopes (protocol layer).
    INVALID_JSON = "invalid_json"
    MISSING_TYPE = "missing_event_type"
    UNKNOWN_TYPE = "unknown_event_type"
    INVALID_EVENT = "invalid_event"
    FRAME_TOO_LARGE = "frame_too_large"
    BINARY_FRAME = "binary_frame_unsupported"

    # Session.
    SESSION_CLOSED = "session_closed"
    STALE_FENCE = "stale_fence"
    RESUME_CONFLICT = "session_resume_conflict"
    RESUME_TOKEN_INVALID = "invalid_resume_token"
    RESUME_NOT_FIRST = "session_resume_not_first"
    SESSION_NOT_FOUND = "session_not_found"
    RATE_LIMITED = "rate_limited"  # too many failed resumes: wait retry_after_ms
    SESSION_OPEN_FAILED = "session_open_failed"  # the log could not record a new session's first event
    SESSION_RESUME_FAILED = "session_resume_failed"  # the log could not record a resume
    INVALID_TURN_SIGNAL = "invalid_turn_signal"
    BUFFER_NOT_EMPTY = "input_audio_buffer_not_empty"
    SESSION_ALREADY_OPEN = "session_already_open"
    MODEL_UPDATE_UNSUPPORTED = "model_update_unsupported"
    MODEL_NOT_FOUND = "model_not_found"  # OpenAI's code for a model it does not serve
    VOICE_UPDATE_AFTER_AUDIO = "voice_update_after_audio_unsupported"
    UNSUPPORTED_AUDIO_FORMAT = "unsupported_audio_format"
    UNSUPPORTED_TURN_DETECTION = "unsupported_turn_detection"
    SERVER_VAD_UNAVAILABLE = "server_vad_unavailable"  # vLLM-Omni's code: the selected detector cannot run here
    UNSUPPORTED_MODALITIES = "unsupported_output_modalities"
    UNSUPPORTED_VOICE = "unsupported_voice"
    INSTRUCTIONS_TOO_LONG = "instructions_too_long"
    FULL_DUPLEX_UNSUPPORTED = "full_duplex_unsupported"  # duplex.mode full_duplex on a turn-based engine
    FULL_DUPLEX_NO_BUFFER = "full_duplex_no_input_buffer"  # commit / clear / input.cancel in a full-duplex session
    FULL_DUPLEX_RESPONSE_OPTIONS = "full_duplex_response_options"  # response.create settings a full-duplex turn cannot take
    TURN_MODE_BUSY = "turn_mode_change_busy"  # duplex.mode changed while a response runs or input waits
    LOG_UNAVAILABLE = "log_unavailable"  # the log could not store the command: nothing applied, retry

    # Input.
    INVALID_AUDIO_BASE64 = "invalid_audio_base64"
    INVALID_AUDIO_LENGTH = "invalid_audio_length"
    INPUT_TEXT_EMPTY = "input_text_empty"
    INPUT_TEXT_TOO_LONG = "input_text_too_long"
    BUFFER_FULL = "input_audio_buffer_full"
    COMMIT_EMPTY = "input_audio_buffer_commit_empty"  # OpenAI

    # Responses.
    ACTIVE_RESPONSE = "conversation_already_has_active_response"  # OpenAI
    CANCEL_NOT_ACTIVE = "response_cancel_not_active"  # OpenAI
    UNSUPPORTED_RESPONSE_OPTION = "unsupported_response_option"
    TRANSCRIPTION_SESSION = "response_unsupported_in_transcription_session"
    INPUT_ITEM_NOT_FOUND = "response_input_item_not_found"
    TOO_MANY_RESPONSES = "too_many_active_responses"

    # Playback and items.
    PLAYBACK_TARGET_NOT_FOUND = "playback_target_not_found"
    PLAYBACK_AMBIGUOUS = "playback_ack_ambiguous"
    PLAYBACK_ITEM_MISMATCH = "playback_item_mismatch"
    PLAYBACK_OUT_OF_RANGE = "playback_ack_out_of_range"
    PLAYBACK_TOO_LATE = "playback_ack_too_late"
    INVALID_ITEM = "invalid_item"
    INVALID_TOOL = "invalid_tool"
    ITEM_EXISTS = "item_already_exists"
    ITEM_CREATE_DUPLICATE = "item_create_duplicate_item_id"  # OpenAI (LiveKit treats it as "already there")
    PREVIOUS_ITEM_NOT_FOUND = "previous_item_not_found"
    RETRIEVE_INVALID_ITEM = "item_retrieve_invalid_item_id"  # OpenAI
    DELETE_INVALID_ITEM = "item_delete_invalid_item_id"  # OpenAI
    ITEM_IN_PROGRESS = "item_in_progress"
    TRUNCATE_INVALID_ITEM = "item_truncate_invalid_item_id"  # OpenAI
    TRUNCATE_UNSUPPORTED_CONTENT = "unsupported_content_type"  # as reported for OpenAI
    TRUNCATE_OUT_OF_RANGE = "audio_end_ms_out_of_range"
    INVALID_CONTENT_INDEX = "invalid_content_index"

    # Function calling (docs/protocol.md, "Function calling").
    FUNCTION_CALL_NOT_FOUND = "function_call_not_found"  # no call of this session has that call_id
    FUNCTION_CALL_ANSWERED = "function_call_already_answered"  # a second output for one call
    FUNCTION_CALL_CANCELLED = "function_call_cancelled"  # its response was cancelled or failed
    FUNCTION_CALL_IN_PROGRESS = "function_call_in_progress"  # its arguments are still streaming
    FUNCTION_CALL_DUPLICATE = "function_call_duplicate_call_id"  # a client call reusing a call_id
    FUNCTION_TEXT_TOO_LONG = "function_call_text_too_long"  # output / arguments over the bound

    # World sessions (vLLM-Omni's admission codes).
    DUPLICATE_EVENT = "duplicate_event"
    STALE_EVENT = "stale_event"
    QUEUE_FULL = "queue_full"
    INVALID_INTERACTION = "invalid_interaction"
    SESSION_FAILED = "session_failed"
    SESSION_NOT_STARTED = "session_not_started"

    # Engine side (carried by ``response.done`` status_details.error).
    TICK_IDENTITY_MISMATCH = "tick_identity_mismatch"
    ENGINE_FAILED = "engine_failed"
    INVALID_FUNCTION_CALL = "invalid_engine_function_call"  # an engine's call broke the streaming rules
    INVALID_BACKCHANNEL = "invalid_engine_backchannel"  # a full-duplex backchannel not a whole turn of its own


#: The Realtime ``error.type`` bucket of codes that are not ``invalid_request_error``.
ERROR_TYPES: dict[str, str] = {
    Code.TICK_IDENTITY_MISMATCH: "server_error",
    Code.ENGINE_FAILED: "server_error",
    Code.INVALID_FUNCTION_CALL: "server_error",
    Code.INVALID_BACKCHANNEL: "server_error",
    Code.LOG_UNAVAILABLE: "server_error",
    Code.SERVER_VAD_UNAVAILABLE: "server_error",
    Code.SESSION_OPEN_FAILED: "server_error",
    Code.SESSION_RESUME_FAILED: "server_error",
}
