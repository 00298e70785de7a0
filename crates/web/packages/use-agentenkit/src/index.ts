export { ApiError, createClient } from "./client";
export type { Client, ClientOptions, SubscribeOptions, Subscription } from "./client";
export { useAgentThread } from "./hook";
export type { AgentThread } from "./hook";
export { SseParser } from "./sse";
export type { SseEvent } from "./sse";
export type * from "./types";
