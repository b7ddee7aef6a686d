"""The beta Realtime dialect, for clients that send ``OpenAI-Beta: realtime=v1``.

Beta and GA differ in names and shapes, not in meaning (docs/sources.md, "GA and beta naming"):
a beta client's events are translated to GA before parsing, and every GA server event is
translated to its beta form before sending. The log holds one vocabulary whatever the dialect.
"""

from __future__ import annotations

from typing import Any

__all__ = ["client_event_to_ga", "wire_to_beta", "BETA_FORMATS"]

#: Beta audio format names and the GA format objects they mean.
BETA_FORMATS: dict[str, dict[str, Any]] = {
    "pcm16": {"type": "audio/pcm", "rate": 24000},
    "g711_ulaw": {"type": "audio/pcmu"},
    "g711_alaw": {"type": "audio/pcma"},
}
_GA_TO_BETA_FORMAT = {"audio/pcmu": "g711_ulaw", "audio/pcma": "g711_alaw"}

_RENAMES = {
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
    "response.output_text.delta": "response.text.delta",
    "response.output_text.done": "response.text.done",
    "conversation.item.added": "conversation.item.created",
}


def _format(name: Any) -> Any:
    return BETA_FORMATS.get(name, {"type": name}) if isinstance(name, str) else name


def _modalities(mods: Any) -> Any:
    if not isinstance(mods, list):
        return mods
    return ["audio"] if "audio" in mods else [m for m in mods if m == "text"] or mods


def client_event_to_ga(event: dict[str, Any]) -> dict[str, Any]:
    """A beta client event in GA shape (unknown keys pass through, so GA validation names them)."""
    t = event.get("type")
    if t == "session.update" and isinstance(event.get("session"), dict):
        s = dict(event["session"])
        ga: dict[str, Any] = {"type": "realtime"}
        audio_in: dict[str, Any] = {}
        audio_out: dict[str, Any] = {}
        for key, value in s.items():
            if key == "modalities":
                ga["output_modalities"] = _modalities(value)
            elif key == "input_audio_format":
                audio_in["format"] = _format(value)
            elif key == "output_audio_format":
                audio_out["format"] = _format(value)
            elif key == "voice":
                audio_out["voice"] = value
            elif key == "turn_detection":
                audio_in["turn_detection"] = value
            elif key == "input_audio_transcription":
                audio_in["transcription"] = value
            elif key == "input_audio_noise_reduction":
                audio_in["noise_reduction"] = value
            elif key == "max_response_output_tokens":
                ga["max_output_tokens"] = value
            elif key == "speed":
                audio_out["speed"] = value
            else:
                ga[key] = value
        if audio_in or audio_out:
            ga["audio"] = {k: v for k, v in (("input", audio_in), ("output", audio_out)) if v}
        return {**event, "session": ga}
    if t == "response.create" and isinstance(event.get("response"), dict):
        r = dict(event["response"])
        ga = {}
        out: dict[str, Any] = {}
        for key, value in r.items():
            if key == "modalities":
                ga["output_modalities"] = _modalities(value)
            elif key == "voice":
                out["voice"] = value
            elif key == "output_audio_format":
                out["format"] = _format(value)
            elif key == "max_output_tokens":
                ga["max_output_tokens"] = value
            else:
                ga[key] = value
        if out:
            ga["audio"] = {"output": out}
        return {**event, "response": ga}
    if t == "conversation.item.create" and isinstance(event.get("item"), dict):
        item = dict(event["item"])
        if isinstance(item.get("content"), list):
            item["content"] = [
                {**c, "type": "output_text"} if isinstance(c, dict) and c.get("type") == "text" and item.get("role") == "assistant" else c
                for c in item["content"]
            ]
        return {**event, "item": item}
    return event


def _beta_format(fmt: dict[str, Any]) -> str:
    return _GA_TO_BETA_FORMAT.get(fmt.get("type", ""), "pcm16")


def _beta_session(s: dict[str, Any]) -> dict[str, Any]:
    audio = s.get("audio", {})
    inp, out = audio.get("input", {}), audio.get("output", {})
    if s.get("type") == "transcription":  # beta's transcription_session shape
        return {
            "id": s.get("id"),
            "object": "realtime.transcription_session",
            "input_audio_format": _beta_format(inp.get("format", {})),
            "input_audio_transcription": inp.get("transcription"),
            "input_audio_noise_reduction": inp.get("noise_reduction"),
            "turn_detection": inp.get("turn_detection"),
            "include": s.get("include"),
            "duplex": s.get("duplex"),
        }
    modalities = ["text", "audio"] if "audio" in s.get("output_modalities", []) else ["text"]
    return {
        "id": s.get("id"),
        "object": "realtime.session",
        "model": s.get("model"),
        "modalities": modalities,
        "instructions": s.get("instructions", ""),
        "voice": out.get("voice"),
        "input_audio_format": _beta_format(inp.get("format", {})),
        "output_audio_format": _beta_format(out.get("format", {})),
        "input_audio_transcription": inp.get("transcription"),
        "input_audio_noise_reduction": inp.get("noise_reduction"),
        "turn_detection": inp.get("turn_detection"),
        "tools": s.get("tools", []),
        "tool_choice": s.get("tool_choice", "auto"),
        "temperature": s.get("temperature", 0.8),
        "max_response_output_tokens": s.get("max_output_tokens", "inf"),
        "speed": out.get("speed", 1.0),
        "tracing": s.get("tracing"),
        "duplex": s.get("duplex"),
    }


def _beta_item(item: dict[str, Any]) -> dict[str, Any]:
    if item.get("type", "message") != "message":
        return item  # function items have the same shape in both dialects
    content = []
    for c in item.get("content", []):
        kind = {"output_audio": "audio", "output_text": "text"}.get(c.get("type"), c.get("type"))
        content.append({**c, "type": kind})
    return {**item, "content": content}


def _beta_response(r: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in r.items() if k not in ("output_modalities", "audio")}
    out["modalities"] = ["text", "audio"] if "audio" in r.get("output_modalities", []) else ["text"]
    fmt = r.get("audio", {}).get("output", {})
    out["voice"] = fmt.get("voice")
    out["output_audio_format"] = _beta_format(fmt.get("format", {}))
    out["output"] = [_beta_item(i) for i in r.get("output", [])]
    return out


def wire_to_beta(wire: dict[str, Any]) -> dict[str, Any] | None:
    """A GA server event in its beta form; ``None`` for GA-only events a beta client never gets
    (``conversation.item.done``)."""
    t = wire["type"]
    if t == "conversation.item.done":
        return None
    out = dict(wire)
    out["type"] = _RENAMES.get(t, t)
    if "session" in out and isinstance(out["session"], dict):
        out["session"] = _beta_session(out["session"])
    if "item" in out and isinstance(out["item"], dict):
        out["item"] = _beta_item(out["item"])
    if "response" in out and isinstance(out["response"], dict):
        out["response"] = _beta_response(out["response"])
    return out
