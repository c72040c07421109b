export * from "./client.js";
export * from "./errors.js";
export { checkBaseUrl, type Fetch, type Retries, type RetryNotice, type Token } from "./transport.js";
export type { components, paths } from "./openapi.js";
