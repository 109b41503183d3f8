package reprocess.landing;

import java.io.IOException;
import java.io.StringWriter;
import java.time.ZoneOffset;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.types.variant.VariantBuilder;

/**
 * The landing contract's structural checks of one line in a single pass, for the common case of a well-formed record.
 *
 * <p>A landing line passes the structural part of the contract ({@code reprocess.landing.contract}) when it is valid
 * UTF-8 without U+FFFD, one JSON object alone on the line, without duplicate keys at any depth, and each known field
 * has its JSON type: {@code message_id}, {@code address}, {@code payload}, {@code failed_at} strings;
 * {@code error_class}, {@code error_message}, {@code consumer_group}, {@code ordering_key} strings or null;
 * {@code headers} an object of strings or null; {@code delivery_count} an integer that fits a long, or null.
 * The general path checks that with built-in expressions: a strict {@code try_parse_json} of {@code [line]} for the
 * grammar, the duplicates and the JSON types, and {@code from_json} for the values. That is two parses and some forty
 * expressions per line, two thirds of the landing step's time (bench/RESULTS.md, twenty-third run).
 *
 * <p>{@link #call} returns the values as {@code from_json} would give them, in the layout of
 * {@code contract._FAST_SCHEMA} ({@code contract._VALUES_SCHEMA} and {@code extra}), when the line certainly passes
 * those checks. Unknown fields are rendered into {@code extra} as the general path renders them ({@code to_json} of
 * the variant object's other fields: keys in Java's string order, as the variant builder sorts them, and Jackson's
 * escaping). Strings, integers that fit a long, booleans and null are written here; any other value (a fraction, an
 * object, an array, a larger integer) is built into a variant by Spark's own {@link VariantBuilder} from the same
 * parser, and written as that variant's {@code toJson}, as {@code to_json} writes a variant. It returns null in every
 * other case, including every case it is unsure of: the general path then decides the line, so this class can make
 * a line cheaper but never changes what is quarantined or ingested. The value checks ({@code EMPTY_MESSAGE_ID}, the
 * address, the timestamp, the payload size...) stay built-in expressions that run on every line alike.
 *
 * <p>Same grammar as the general path: Spark's variant parser uses a default {@link JsonFactory} on the same Java
 * string (the line decoded as UTF-8, malformed bytes as U+FFFD), and so does this class, with duplicate detection on
 * and one level less of nesting allowed (the general path's {@code [...]} is a level of its own).
 * {@code tests/test_landing_parser.py} checks on generated and hand-written lines that both paths agree.
 *
 * <p>Registered per Spark session as {@code reprocess_well_formed_record} ({@code contract.use_jvm_parser}).
 * (Named {@code WellFormedRecord} before it rendered {@code extra}: a Spark Connect server with that older jar has no
 * class of this name, and its landing is checked by the expressions alone.)
 */
public final class WellFormedLine implements UDF1<String, Row> {

  private static final long serialVersionUID = 1L;

  /** The variant parser refuses values above 128 MiB; lines longer than this are left to the general path. */
  static final int MAX_CHARS = 16 << 20;

  /**
   * Jackson's defaults but one level less deep: the general path parses the line inside {@code [...]}, one level
   * deeper than this class does, so a line at Jackson's depth limit is malformed to it (a nested unknown value can
   * reach it).
   */
  private static final JsonFactory FACTORY = JsonFactory.builder()
      .streamReadConstraints(StreamReadConstraints.builder()
          .maxNestingDepth(StreamReadConstraints.defaults().getMaxNestingDepth() - 1).build())
      .build();

  // Positions in contract._VALUES_SCHEMA.
  private static final int MESSAGE_ID = 0;
  private static final int ADDRESS = 1;
  private static final int PAYLOAD = 2;
  private static final int FAILED_AT = 3;
  private static final int HEADERS = 4;
  private static final int DELIVERY_COUNT = 5;
  private static final int ERROR_CLASS = 6;
  private static final int ERROR_MESSAGE = 7;
  private static final int CONSUMER_GROUP = 8;
  private static final int ORDERING_KEY = 9;
  private static final int EXTRA = 10;
  private static final int FIELDS = 11;

  private static int position(String name) {
    switch (name) {
      case "message_id": return MESSAGE_ID;
      case "address": return ADDRESS;
      case "payload": return PAYLOAD;
      case "failed_at": return FAILED_AT;
      case "headers": return HEADERS;
      case "delivery_count": return DELIVERY_COUNT;
      case "error_class": return ERROR_CLASS;
      case "error_message": return ERROR_MESSAGE;
      case "consumer_group": return CONSUMER_GROUP;
      case "ordering_key": return ORDERING_KEY;
      default: return -1;
    }
  }

  @Override
  public Row call(String line) {
    if (line == null || line.length() > MAX_CHARS || line.indexOf('\uFFFD') >= 0) {
      return null;
    }
    try (JsonParser parser = FACTORY.createParser(line)) {
      parser.enable(JsonParser.Feature.STRICT_DUPLICATE_DETECTION);
      Object[] values = read(parser, line.indexOf("\\u") >= 0);
      return values == null ? null : RowFactory.create(values);
    } catch (IOException | RuntimeException e) {  // not JSON, a duplicate key, a number out of range...
      return null;
    }
  }

  /**
   * The values of the one object on the line, or null when the line is not certainly a well-formed record.
   * {@code escapes}: the line has a {@code \}{@code u} escape, so a string may hold a surrogate without its pair,
   * which the variant parser refuses (valid UTF-8 never decodes to one).
   */
  private static Object[] read(JsonParser parser, boolean escapes) throws IOException {
    if (parser.nextToken() != JsonToken.START_OBJECT) {
      return null;
    }
    Object[] values = new Object[FIELDS];
    Map<String, Object> unknown = null;
    JsonToken token;
    while ((token = parser.nextToken()) == JsonToken.FIELD_NAME) {
      String name = parser.currentName();
      int at = position(name);
      JsonToken value = parser.nextToken();
      if (at < 0) {  // an unknown field, kept for extra
        if (escapes && !paired(name)) {
          return null;
        }
        Object kept = scalar(parser, value, escapes);
        if (kept == null) {
          if (value == JsonToken.VALUE_STRING) {
            return null;  // a surrogate without its pair
          }
          // Spark's own builder, as the general path's parse builds the value: it refuses a nested key or string with
          // a surrogate without its pair (an IOException: the general path decides), and a duplicate key
          kept = new Rendered(VariantBuilder.parseJson(parser, false).toJson(ZoneOffset.UTC));
        }
        if (unknown == null) {
          unknown = new TreeMap<>();  // String.compareTo: the order the variant builder sorts an object's keys in
        }
        unknown.put(name, kept);
        continue;
      }
      switch (at) {
        case MESSAGE_ID:
        case ADDRESS:
        case PAYLOAD:
        case FAILED_AT:
          if (value != JsonToken.VALUE_STRING || (values[at] = text(parser, escapes)) == null) {
            return null;  // missing (null), of the wrong type, or a surrogate without its pair
          }
          break;
        case HEADERS:
          if (value == JsonToken.START_OBJECT) {
            Map<String, String> headers = readHeaders(parser, escapes);
            if (headers == null) {
              return null;
            }
            values[at] = headers;
          } else if (value != JsonToken.VALUE_NULL) {
            return null;
          }
          break;
        case DELIVERY_COUNT:
          if (value == JsonToken.VALUE_NUMBER_INT) {
            if ((values[at] = whole(parser)) == null) {
              return null;
            }
          } else if (value != JsonToken.VALUE_NULL) {
            return null;
          }
          break;
        default:  // the optional strings
          if (value == JsonToken.VALUE_STRING) {
            if ((values[at] = text(parser, escapes)) == null) {
              return null;
            }
          } else if (value != JsonToken.VALUE_NULL) {
            return null;
          }
      }
    }
    if (token != JsonToken.END_OBJECT || parser.nextToken() != null) {
      return null;  // anything after the object: a second value, or text
    }
    for (int i = MESSAGE_ID; i <= FAILED_AT; i++) {
      if (values[i] == null) {
        return null;  // a required field is missing
      }
    }
    if (unknown != null) {
      values[EXTRA] = extra(unknown);
    }
    return values;
  }

  /** A JSON null. */
  private static final Object NULL = new Object();

  /** An unknown field's value as the general path writes it: a variant's {@code toJson} (no time zone applies). */
  private static final class Rendered {
    final String json;

    Rendered(String json) {
      this.json = json;
    }
  }

  /**
   * An unknown field's value, if it is one this class writes itself: a String, a Long, a Boolean or {@link #NULL};
   * else null (a string with a lone surrogate, or a value for {@link Rendered}).
   */
  private static Object scalar(JsonParser parser, JsonToken value, boolean escapes) throws IOException {
    switch (value) {
      case VALUE_STRING:
        return text(parser, escapes);
      case VALUE_NUMBER_INT:
        return whole(parser);
      case VALUE_TRUE:
        return Boolean.TRUE;
      case VALUE_FALSE:
        return Boolean.FALSE;
      case VALUE_NULL:
        return NULL;
      default:
        return null;  // a fraction (the variant keeps its digits its own way), an object, an array
    }
  }

  /** The current string token's text, or null when it holds a surrogate without its pair (see {@link #read}). */
  private static String text(JsonParser parser, boolean escapes) throws IOException {
    String text = parser.getText();
    return escapes && !paired(text) ? null : text;
  }

  /** The current integer token's value, or null beyond a long (a decimal to the variant parser). */
  private static Long whole(JsonParser parser) throws IOException {
    JsonParser.NumberType type = parser.getNumberType();
    return type == JsonParser.NumberType.INT || type == JsonParser.NumberType.LONG ? parser.getLongValue() : null;
  }

  /** The unknown fields as one JSON object, as {@code to_json} renders the general path's map of variants. */
  private static String extra(Map<String, Object> unknown) throws IOException {
    StringWriter out = new StringWriter();
    try (JsonGenerator gen = FACTORY.createGenerator(out)) {
      gen.writeStartObject();
      for (Map.Entry<String, Object> field : unknown.entrySet()) {
        gen.writeFieldName(field.getKey());
        Object v = field.getValue();
        if (v instanceof String) {
          gen.writeString((String) v);
        } else if (v instanceof Long) {
          gen.writeNumber((Long) v);
        } else if (v instanceof Boolean) {
          gen.writeBoolean((Boolean) v);
        } else if (v instanceof Rendered) {
          gen.writeRawValue(((Rendered) v).json);
        } else {
          gen.writeNull();
        }
      }
      gen.writeEndObject();
    }
    return out.toString();
  }

  /** An object of strings, in the order of the line, or null when a value is not a string. */
  private static Map<String, String> readHeaders(JsonParser parser, boolean escapes) throws IOException {
    Map<String, String> headers = new LinkedHashMap<>();
    while (parser.nextToken() == JsonToken.FIELD_NAME) {
      String key = parser.currentName();
      if (parser.nextToken() != JsonToken.VALUE_STRING) {
        return null;
      }
      String value = parser.getText();
      if (escapes && !(paired(key) && paired(value))) {
        return null;
      }
      headers.put(key, value);
    }
    return headers;  // the loop ends at the object's end: the parser allows nothing else there
  }

  /** Whether every surrogate in {@code s} is half of a pair (high, then low): text that UTF-8 can encode. */
  static boolean paired(String s) {
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (Character.isHighSurrogate(c) && i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1))) {
        i++;
      } else if (Character.isSurrogate(c)) {
        return false;
      }
    }
    return true;
  }
}
