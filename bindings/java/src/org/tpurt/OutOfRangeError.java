package org.tpurt;

/** Status code 11 (TensorFlow's OutOfRangeError). */
public class OutOfRangeError extends OpError {
  public OutOfRangeError(String message) {
    super(11, message);
  }
}
