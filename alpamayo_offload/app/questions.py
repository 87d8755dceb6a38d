"""Questions waiting for an answer (VQA): a short first-in first-out queue, never unbounded.

The node answers at most one question after each driving inference, so a burst of questions
cannot delay driving by more than one answer; questions beyond `capacity` push out the oldest,
and each refusal or drop has a named reason the node reports in /diagnostics.
"""
from __future__ import annotations

import threading
from collections import deque

QUESTION_EMPTY = 'question_empty'            # a blank question: not queued
QUESTION_DROPPED = 'question_queue_full'     # the oldest waiting question was dropped
QUESTION_FAILED = 'question_failed'          # answering raised (the message says why)


class PendingQuestions:
    """Thread-safe queue of questions; `push` says what it refused or dropped."""

    def __init__(self, capacity: int) -> None:
        """Keep at most `capacity` (>= 1) questions."""
        if capacity < 1:
            raise ValueError(f'capacity {capacity} must be >= 1')
        self._items: deque[str] = deque()
        self._capacity = capacity
        self._lock = threading.Lock()

    def push(self, question: str) -> str:
        """Queue `question`; return '' or the reason something was refused or dropped."""
        if not question.strip():
            return QUESTION_EMPTY
        with self._lock:
            dropped = len(self._items) >= self._capacity
            if dropped:
                self._items.popleft()
            self._items.append(question)
        return QUESTION_DROPPED if dropped else ''

    def pop(self) -> str | None:
        """Take the oldest waiting question (None: none waits)."""
        with self._lock:
            return self._items.popleft() if self._items else None

    def __len__(self) -> int:
        """Questions waiting."""
        with self._lock:
            return len(self._items)

    def clear(self) -> None:
        """Forget every waiting question (deactivate)."""
        with self._lock:
            self._items.clear()
