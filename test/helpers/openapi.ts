/**
 * Validates HTTP exchanges against Qdrant's published OpenAPI description (test/vendor/qdrant/openapi.json, see
 * SOURCE.md there), so the project and the Qdrant test server cannot drift away from real Qdrant unnoticed:
 * an endpoint, parameter, body field or answer shape the description does not allow is a violation.
 * Test-only: never part of the build.
 */
import { readFileSync } from 'node:fs';
import { Ajv, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;

export const OPENAPI_PATH = new URL('../vendor/qdrant/openapi.json', import.meta.url);

type Json = Record<string, any>;

interface Operation {
  method: string;
  template: string;
  pattern: RegExp;
  pathParams: string[];
  op: Json;
}

export interface RequestToCheck {
  method: string;
  path: string;
  query: URLSearchParams;
  contentType?: string | undefined;
  /** Parsed JSON body, or for multipart the field names present. */
  body?: unknown;
  multipartFields?: string[];
}

export interface ResponseToCheck {
  method: string;
  path: string;
  status: number;
  contentType?: string | undefined;
  body?: unknown;
}

/** OpenAPI 3.0 `nullable` → JSON Schema: `{nullable: true}` alone means null; a typed one also accepts null. */
function toJsonSchema(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(toJsonSchema);
  if (!node || typeof node !== 'object') return node;
  const out: Json = {};
  for (const [k, v] of Object.entries(node as Json)) {
    if (k === 'example' || k === 'examples' || k === 'discriminator') continue;
    out[k] = toJsonSchema(v);
  }
  if (out.nullable === true) {
    delete out.nullable;
    if (out.type !== undefined) {
      out.type = [...new Set([...(Array.isArray(out.type) ? out.type : [out.type]), 'null'])];
      if (Array.isArray(out.enum) && !out.enum.includes(null)) out.enum = [...out.enum, null];
    } else if (Object.keys(out).every((k) => k === 'description' || k === 'default')) {
      out.type = 'null';
    } else {
      return { anyOf: [out, { type: 'null' }] };
    }
  } else if (out.nullable === false) {
    delete out.nullable;
  }
  return out;
}

export class OpenApiValidator {
  private readonly ajv: Ajv;
  private readonly ops: Operation[] = [];
  private readonly cache = new Map<unknown, ValidateFunction>();

  constructor(specPath: URL | string = OPENAPI_PATH) {
    const spec = JSON.parse(readFileSync(specPath, 'utf8')) as Json;
    this.ajv = new Ajv({ strict: false, allErrors: true, validateFormats: true });
    addFormats(this.ajv);
    const uint = { type: 'number', validate: (n: number) => Number.isInteger(n) && n >= 0 } as const;
    for (const f of ['uint', 'uint8', 'uint32', 'uint64']) this.ajv.addFormat(f, uint);
    this.ajv.addFormat('int64', { type: 'number', validate: (n: number) => Number.isInteger(n) });
    for (const f of ['float', 'double']) this.ajv.addFormat(f, { type: 'number', validate: () => true });
    this.ajv.addFormat('partial-date-time', /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?$/);
    this.ajv.addFormat('binary', true);
    this.ajv.addSchema({ $id: 'qdrant', components: toJsonSchema(spec.components) as Json });
    for (const [template, methods] of Object.entries(spec.paths as Json)) {
      const pathParams: string[] = [];
      const pattern = new RegExp(
        '^' + template.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\\?\{([^}]+)\\?\}/g, (_m, name: string) => (pathParams.push(name), '([^/]+)')) + '$',
      );
      for (const [method, op] of Object.entries(methods as Json)) {
        this.ops.push({ method: method.toUpperCase(), template, pattern, pathParams: [...pathParams], op: op as Json });
      }
    }
    // Literal paths (`/snapshots/upload`) before templated ones (`/snapshots/{snapshot_name}`).
    this.ops.sort((a, b) => a.pathParams.length - b.pathParams.length);
  }

  find(method: string, path: string): { op: Operation; params: Record<string, string> } | null {
    for (const op of this.ops) {
      if (op.method !== method) continue;
      const m = op.pattern.exec(path);
      if (!m) continue;
      const params: Record<string, string> = {};
      op.pathParams.forEach((name, i) => (params[name] = decodeURIComponent(m[i + 1]!)));
      return { op, params };
    }
    return null;
  }

  private validator(schema: unknown): ValidateFunction {
    let v = this.cache.get(schema);
    if (!v) {
      const rewritten = JSON.parse(JSON.stringify(toJsonSchema(schema)).replace(/"#\/components\//g, '"qdrant#/components/'));
      v = this.ajv.compile(rewritten);
      this.cache.set(schema, v);
    }
    return v;
  }

  private check(schema: unknown, value: unknown, where: string): string[] {
    const v = this.validator(schema);
    if (v(value)) return [];
    return (v.errors ?? []).slice(0, 5).map((e) => `${where}${e.instancePath} ${e.message ?? ''} ${JSON.stringify(e.params)}`);
  }

  /** Every way this request departs from the description; [] when it conforms. */
  validateRequest(req: RequestToCheck): string[] {
    const found = this.find(req.method, req.path);
    if (!found) return [`${req.method} ${req.path}: no such operation in Qdrant's OpenAPI description`];
    const { op } = found;
    const name = `${req.method} ${op.template}`;
    const errors: string[] = [];
    const declared = new Map<string, Json>();
    for (const p of (op.op.parameters ?? []) as Json[]) declared.set(`${p.in}:${p.name}`, p);
    for (const key of new Set(req.query.keys())) {
      const p = declared.get(`query:${key}`);
      if (!p) {
        errors.push(`${name}: query parameter "${key}" is not in the description`);
        continue;
      }
      errors.push(...this.check(p.schema, coerceQuery(req.query.get(key)!, p.schema), `${name} ?${key}`));
    }
    for (const p of declared.values()) {
      if (p.in === 'query' && p.required && !req.query.has(p.name)) errors.push(`${name}: required query parameter "${p.name}" missing`);
    }
    const body = op.op.requestBody as Json | undefined;
    const hasBody = req.body !== undefined || (req.multipartFields?.length ?? 0) > 0;
    if (!body) {
      if (hasBody) errors.push(`${name}: has a body, the description allows none`);
      return errors;
    }
    if (!hasBody) {
      if (body.required) errors.push(`${name}: body required`);
      return errors;
    }
    const type = (req.contentType ?? '').split(';')[0]!.trim();
    const media = body.content?.[type] as Json | undefined;
    if (!media) return [...errors, `${name}: content type "${type}" not allowed (${Object.keys(body.content ?? {}).join(', ')})`];
    if (type === 'multipart/form-data') {
      const props = Object.keys(media.schema?.properties ?? {});
      for (const f of req.multipartFields ?? []) if (!props.includes(f)) errors.push(`${name}: multipart field "${f}" not in the description`);
      return errors;
    }
    return [...errors, ...this.check(media.schema, req.body, `${name} body`)];
  }

  /** Every way this response departs from the description; [] when it conforms. */
  validateResponse(res: ResponseToCheck): string[] {
    const found = this.find(res.method, res.path);
    if (!found) return [`${res.method} ${res.path}: no such operation`];
    const name = `${res.method} ${found.op.template} -> ${res.status}`;
    const responses = found.op.op.responses as Json;
    const spec = (responses[String(res.status)] ?? responses[`${String(res.status)[0]}XX`] ?? responses.default) as Json | undefined;
    if (!spec) return [`${name}: status not in the description (${Object.keys(responses).join(', ')})`];
    if (!spec.content) return [];
    const type = (res.contentType ?? '').split(';')[0]!.trim();
    const media = spec.content[type] as Json | undefined;
    if (!media) return [`${name}: content type "${type}" not in the description (${Object.keys(spec.content).join(', ')})`];
    if (type !== 'application/json') return [];
    return this.check(media.schema, res.body, `${name} body`);
  }
}

function coerceQuery(value: string, schema: Json | undefined): unknown {
  const type = schema?.type;
  if (type === 'boolean') return value === 'true' ? true : value === 'false' ? false : value;
  if (type === 'integer' || type === 'number') return value.trim() !== '' && !Number.isNaN(Number(value)) ? Number(value) : value;
  return value;
}
