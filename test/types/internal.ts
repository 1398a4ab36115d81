// Internal files are not importable through the package name (the exports map has only '.').
// @ts-expect-error not exported
import { Session } from 'capsule-resource-plane/dist/session/session.js';
void Session;
