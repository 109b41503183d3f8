package reprocess.landing;

import java.io.IOException;
import java.util.LinkedHashMap;
import java.util.Map;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;

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
 * {@code contract._VALUES_SCHEMA}, when the line certainly passes those checks and holds no unknown field (whose
 * {@code extra} text the general path renders). It returns null in every other case, including every case it is
 * unsure of: the general path then decides the line, so this class can make a line cheaper but never changes what
 * is quarantined or ingested. The value checks ({@code EMPTY_MESSAGE_ID}, the address, the timestamp, the payload
 * size...) stay built-in expressions that run on every line alike.
 *
 * <p>Same grammar as the general path: Spark's variant parser uses a default {@link JsonFactory} on the same Java
 * string (the line decoded as UTF-8, malformed bytes as U+FFFD), and so does this class, with duplicate detection on.
 * {@code tests/test_landing_parser.py} checks on generated and hand-written lines that both paths agree.
 *
 * <p>Registered per Spark session as {@code reprocess_well_formed_record} ({@code contract.use_jvm_parser}).
 */
public final class WellFormedRecord implements UDF1<String, Row> {

  private static final long serialVersionUID = 1L;

  /** The variant parser refuses values above 128 MiB; lines longer than this are left to the general path. */
  static final int MAX_CHARS = 16 << 20;

  private static final JsonFactory FACTORY = new JsonFactory();

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
  private static final int FIELDS = 10;

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
    JsonToken token;
    while ((token = parser.nextToken()) == JsonToken.FIELD_NAME) {
      int at = position(parser.currentName());
      if (at < 0) {
        return null;  // an unknown field: the general path renders it into extra
      }
      JsonToken value = parser.nextToken();
      switch (at) {
        case MESSAGE_ID:
        case ADDRESS:
        case PAYLOAD:
        case FAILED_AT:
          if (value != JsonToken.VALUE_STRING) {
            return null;  // missing (null) or of the wrong type
          }
          values[at] = parser.getText();
          if (escapes && !paired((String) values[at])) {
            return null;
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
            JsonParser.NumberType type = parser.getNumberType();
            if (type != JsonParser.NumberType.INT && type != JsonParser.NumberType.LONG) {
              return null;  // beyond a long: a decimal to the variant parser
            }
            values[at] = parser.getLongValue();
          } else if (value != JsonToken.VALUE_NULL) {
            return null;
          }
          break;
        default:  // the optional strings
          if (value == JsonToken.VALUE_STRING) {
            values[at] = parser.getText();
            if (escapes && !paired((String) values[at])) {
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
    return values;
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
